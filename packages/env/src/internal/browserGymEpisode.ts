/**
 * One BrowserGym episode runner over one browser session: reset to a task instance, step action strings, observe.
 * Shared by the OpenEnv definition and the tool layer. The browser session is replaced on the reset after a loss.
 */
import { Effect, ExecutionStrategy, Exit, Option, Scope } from "effect"
import type * as Browser from "../Browser.js"
import * as Actions from "./browserGymActions.js"
import type { Snapshot } from "./domSnapshot.js"
import { SNAPSHOT_SCRIPT } from "./domSnapshot.js"
import * as Suite from "./miniwobSuite.js"
import { tasks } from "./miniwobTasks.js"
import { decodeRgb } from "./png.js"
import { baseUrl, suiteUrl } from "./taskServer.js"

export type Observation = {
  readonly text: string
  readonly url: string
  readonly screenshot: ReadonlyArray<ReadonlyArray<readonly [number, number, number]>> | null
  readonly goal: string
  readonly axtree_txt: string
  readonly pruned_html: string
  readonly error: string
  readonly last_action_error: boolean
}

export interface Outcome {
  readonly observation: Observation
  readonly reward: number
  readonly done: boolean
}

export interface RunnerOptions {
  readonly maxSteps: number
  readonly screenshot: boolean
}

/**
 * A task that cannot be played: no such name (the message lists envtrain's tasks), or a `miniwob.*` task whose
 * real MiniWoB++ page is not there (the message names the fix).
 */
export class UnknownTask extends Error {
  constructor(readonly task: string, message?: string) {
    super(
      message ??
        `unknown task '${task}': use one of ${[...tasks.keys()].join(", ")}, ` +
          `or miniwob.<name> for the real MiniWoB++ suite`
    )
  }
}

export const taskNames = (): ReadonlyArray<string> => [...tasks.keys()]

export interface Runner {
  readonly reset: (
    task: string,
    seed: number
  ) => Effect.Effect<Outcome, UnknownTask | Browser.SessionLost | Browser.BrowserLaunchError | Browser.PageError>
  readonly step: (actionStr: string) => Effect.Effect<Outcome, Browser.SessionLost>
  readonly info: () => {
    readonly task: string
    readonly seed: number
    readonly goal: string
    readonly url: string
    readonly cumReward: number
    readonly steps: number
    readonly done: boolean
    readonly chat: ReadonlyArray<string>
  }
}

/** Reads the page, retrying once when a navigation replaced the document mid-read. */
const snapshot = (session: Browser.Session) =>
  session.run((page) =>
    page.evaluate(SNAPSHOT_SCRIPT).catch(async () => {
      await page.waitForLoadState("domcontentloaded").catch(() => undefined)
      return page.evaluate(SNAPSHOT_SCRIPT)
    }) as Promise<Snapshot>
  )

export const makeRunner = (
  browser: Browser.Service,
  options: RunnerOptions
): Effect.Effect<Runner, never, Scope.Scope> =>
  Effect.gen(function*() {
    const outer = yield* Effect.scope
    let current: { readonly scope: Scope.CloseableScope; readonly session: Browser.Session } | undefined
    let task = ""
    let seed = 0
    let goal = ""
    let url = ""
    let cumReward = 0
    let steps = 0
    let done = false
    let chat: Array<string> = []

    const freshSession = Effect.gen(function*() {
      if (current !== undefined) {
        const lost = yield* current.session.lost
        if (Option.isNone(lost)) return current.session
        yield* Scope.close(current.scope, Exit.void)
        current = undefined
      }
      const scope = yield* Scope.fork(outer, ExecutionStrategy.sequential)
      const session = yield* Scope.extend(browser.session, scope).pipe(
        Effect.tapError(() => Scope.close(scope, Exit.void))
      )
      current = { scope, session }
      return session
    })

    const observe = (session: Browser.Session, error: string) =>
      Effect.gen(function*() {
        const snap = yield* snapshot(session).pipe(
          Effect.catchTag("PageError", (e) =>
            Effect.succeed(
              { title: "", url, axtree: "", html: "", done: false, raw: 0, hasWob: false, readError: e.message } as
                & Snapshot
                & { readonly readError?: string }
            ))
        )
        url = snap.url
        const screenshot = options.screenshot
          ? yield* session.run((page) => page.screenshot({ type: "png" })).pipe(
            Effect.map((png) => decodeRgb(png)),
            Effect.catchTag("PageError", () => Effect.succeed(null))
          )
          : null
        const observation: Observation = {
          text: snap.axtree !== "" ? snap.axtree : snap.html,
          url: snap.url,
          screenshot,
          goal,
          axtree_txt: snap.axtree,
          pruned_html: snap.html,
          error,
          last_action_error: error !== ""
        }
        return { observation, snap }
      })

    const runner: Runner = {
      reset: (name, s) =>
        Effect.gen(function*() {
          let suitePage: { readonly dir: string; readonly page: string } | undefined
          if (Suite.isSuiteName(name)) {
            const found = Suite.resolve(name)
            if (!found.ok) return yield* Effect.fail(new UnknownTask(name, found.message))
            suitePage = found
          } else if (!tasks.has(name)) return yield* Effect.fail(new UnknownTask(name))
          const session = yield* freshSession
          const base = yield* Effect.promise(() => baseUrl())
          task = name
          seed = s
          steps = 0
          cumReward = 0
          done = false
          chat = []
          if (suitePage !== undefined) {
            const { dir, page: file } = suitePage
            const target = yield* Effect.promise(() => suiteUrl(dir, file))
            yield* session.run((page) => page.goto(target, { waitUntil: "load" }))
            // The page's own episode start, seeded; then its own readiness flag and utterance.
            goal = yield* session.run(async (page) => {
              await page.evaluate(Suite.startScript(s))
              await page.waitForFunction(Suite.READY_SCRIPT, undefined, { timeout: 5_000 })
              return String(await page.evaluate(Suite.GOAL_SCRIPT))
            })
          } else {
            const target = `${base}/miniwob/${name}.html?seed=${s}`
            yield* session.run((page) => page.goto(target, { waitUntil: "load" }))
            // Read without waiting: the page has loaded, and a missing #query is an empty goal, not a wait.
            goal = (yield* session.run((page) =>
              page.evaluate("(document.getElementById('query') || { innerText: '' }).innerText").then(String)
            )).trim()
          }
          const { observation } = yield* observe(session, "")
          return { observation, reward: 0, done: false }
        }),
      step: (actionStr) =>
        Effect.gen(function*() {
          const session = current?.session
          if (session === undefined || done) {
            const error = session === undefined
              ? "no episode: reset first"
              : "the episode is over: reset to start a new one"
            const observation: Observation = {
              text: "",
              url,
              screenshot: null,
              goal,
              axtree_txt: "",
              pruned_html: "",
              error,
              last_action_error: true
            }
            return { observation, reward: 0, done: true }
          }
          steps += 1
          let error = ""
          let actions: ReturnType<typeof Actions.parse> | undefined
          try {
            actions = Actions.parse(actionStr)
          } catch (e) {
            error = e instanceof Error ? e.message : String(e)
          }
          if (actions !== undefined) {
            const parsed = actions
            const effects: Actions.Effects = { chat }
            error = yield* session.run((page) => Actions.run(page, parsed, effects)).pipe(
              Effect.as(""),
              Effect.catchTag("PageError", (e) => Effect.succeed(e.message))
            )
          }
          const { observation, snap } = yield* observe(session, error)
          let reward = 0
          if (snap.done) {
            // BrowserGym's MiniWoB reward: binary on the page's raw reward.
            reward = snap.raw > 0 ? 1 : 0
            done = true
          } else if (steps >= options.maxSteps) {
            done = true
          }
          cumReward += reward
          return { observation, reward, done }
        }),
      info: () => ({ task, seed, goal, url, cumReward, steps, done, chat })
    }
    return runner
  })
