// Which policy server a generation request goes to. Every turn of an episode goes where its first turn went, so the
// server's cached prefix (the conversation so far) is reused, for as long as that server is usable; a new episode
// (or one whose server went down or fell behind) goes to the usable server with the fewest active episodes, then
// the fewest requests in flight, ties in turn. The router never learns that an episode ended: one counts as active
// until `idle` passes without a request (longer than any tool call between two turns), then it is forgotten.

export interface Routable {
  readonly inFlight: number
}

export interface Router<S extends Routable> {
  /** The server for a request of `episode` (undefined: no episode, least-loaded) among the usable `candidates`. */
  readonly choose: (candidates: ReadonlyArray<S>, episode: string | undefined) => S
  /** Active episodes per server. */
  readonly episodesOn: (server: S) => number
}

export const make = <S extends Routable>(idleMillis: number, now: () => number = Date.now): Router<S> => {
  // In order of last use (re-inserted on each request), so the forgotten ones are at the front.
  const episodes = new Map<string, { readonly server: S; readonly last: number }>()
  const counts = new Map<S, number>()
  const count = (s: S) => counts.get(s) ?? 0
  const forget = (key: string, server: S) => {
    episodes.delete(key)
    counts.set(server, count(server) - 1)
  }
  let turn = 0
  return {
    episodesOn: count,
    choose: (candidates, episode) => {
      const t = now()
      for (const [key, e] of episodes) {
        if (t - e.last < idleMillis) break
        forget(key, e.server)
      }
      const held = episode === undefined ? undefined : episodes.get(episode)
      if (held !== undefined) {
        forget(episode!, held.server)
        if (candidates.includes(held.server)) {
          episodes.set(episode!, { server: held.server, last: t })
          counts.set(held.server, count(held.server) + 1)
          return held.server
        }
      }
      let best: Array<S> = []
      for (const s of candidates) {
        const d = best.length === 0 ? -1 : count(s) - count(best[0]) || s.inFlight - best[0].inFlight
        if (d < 0) best = [s]
        else if (d === 0) best.push(s)
      }
      const chosen = best[turn++ % best.length]
      if (episode !== undefined) {
        episodes.set(episode, { server: chosen, last: t })
        counts.set(chosen, count(chosen) + 1)
      }
      return chosen
    }
  }
}
