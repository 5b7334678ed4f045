/**
 * One environment played on several servers (replicas of one OpenEnv environment, e.g. the pods behind a
 * deployment): each episode's session goes to the server with the most free sessions for this process (its limit,
 * from `Client.limitSessions` or learned from the server's CAPACITY_REACHED, less the sessions placed there), and a
 * session a full server refuses (CAPACITY_REACHED, after the client's bounded wait there) is moved to the next
 * server; the episode fails with the refusal only when every server refused it. Rollouts cannot tell it from one
 * server.
 *
 * @example
 * ```ts
 * import { Catch, ServerPool } from "@envtrain/env"
 *
 * const catchOnThree = ServerPool.of(
 *   ["http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"],
 *   (url) => Catch.remote(url)
 * )
 * ```
 *
 * @since 0.0.0
 */
import type * as Environment from "./Environment.js"
import * as internal from "./internal/serverPool.js"

/**
 * One server of a pool and the environment played on it.
 *
 * @since 0.0.0
 */
export type Replica<State, Columns> = internal.Replica<State, Columns>

/**
 * The environment of `replicas`, spread over them (see the module comment). Throws (a defect) for an empty list.
 *
 * @since 0.0.0
 */
export const spread: <State, Columns>(
  replicas: ReadonlyArray<Replica<State, Columns>>
) => Environment.Environment<State, Columns> = internal.spread

/**
 * The environment `remote` plays on one server, spread over `urls`.
 *
 * @since 0.0.0
 */
export const of = <State, Columns>(
  urls: ReadonlyArray<string>,
  remote: (url: string) => Environment.Environment<State, Columns>
): Environment.Environment<State, Columns> =>
  urls.length === 1 ? remote(urls[0]) : spread(urls.map((url) => ({ url, environment: remote(url) })))
