/**
 * One Chromium process (Debian's `/usr/bin/chromium`, driven by playwright-core; nothing is downloaded) as a scoped
 * service, handing out one isolated `BrowserContext` per session.
 *
 * - The browser launches on the first session and is relaunched by the next session after it died (crash, or a
 *   SIGKILL from outside): a dead browser loses only the sessions open on it.
 * - {@link Session.run} runs one piece of page work under a timeout. A crashed page, a closed context, a disconnected
 *   browser or a page that stops answering within the timeout make the session lost ({@link SessionLost}); the
 *   caller must treat its episode as unscoreable, never as a failed one. Other errors (an element not found, an
 *   action's own timeout) are {@link PageError}s: the page is still there.
 * - With `idleCloseMs` the process is closed once no session has been open for that long (the shared instance that
 *   servers and in-process environments use), so an idle program holds no browser.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Browser } from "@envtrain/env"
 *
 * const program = Effect.gen(function*() {
 *   const browser = yield* Browser.Browser
 *   const session = yield* browser.session
 *   const title = yield* session.run((page) => page.goto("http://127.0.0.1:8080/").then(() => page.title()))
 * }).pipe(Effect.scoped, Effect.provide(Browser.Browser.layer()))
 * ```
 *
 * @since 0.0.0
 */
import { Context, Data, Duration, Effect, Layer, Option, Scope } from "effect"
import type { Browser as PwBrowser, BrowserContext, Page } from "playwright-core"
import { chromiumChildPids, findChromium, processTree, pssKiB } from "./internal/chromium.js"

/** How the browser is launched and how long page work may take. */
export interface BrowserOptions {
  /** The Chromium binary (default: `CHROMIUM_PATH`, else `/usr/bin/chromium` or `/usr/bin/chromium-browser`). */
  readonly executablePath?: string | undefined
  /** Playwright's default timeout for each action on a page (default 10 s, BrowserGym's). */
  readonly actionTimeoutMs?: number | undefined
  /** Navigation timeout (default 30 s: a loaded machine with many contexts loads pages slowly). */
  readonly navigationTimeoutMs?: number | undefined
  /** How long one {@link Session.run} may take before the page counts as hung and the session as lost (60 s). */
  readonly stepTimeoutMs?: number | undefined
  /** Launch timeout (30 s). */
  readonly launchTimeoutMs?: number | undefined
  /** Close the process after this long without sessions (default: keep it until the scope closes). */
  readonly idleCloseMs?: number | undefined
  readonly viewport?: { readonly width: number; readonly height: number } | undefined
  /** Per-renderer V8 heap limit in MiB, which bounds each session's page memory (default 256). */
  readonly maxHeapMiB?: number | undefined
}

/** Chromium could not be launched; the message names the fix. */
export class BrowserLaunchError extends Data.TaggedError("BrowserLaunchError")<{ readonly message: string }> {}

/** The session's page or browser is gone (crash, kill, hang): its episode is unscoreable. */
export class SessionLost extends Data.TaggedError("SessionLost")<{ readonly reason: string }> {
  override get message() {
    return `browser session lost: ${this.reason}; the episode is unscoreable (a new session starts a fresh browser)`
  }
}

/** Page work failed while the page is still alive (element missing, action timed out, bad selector). */
export class PageError extends Data.TaggedError("PageError")<{ readonly message: string }> {}

/** One isolated browser context with one page. */
export interface Session {
  /** Runs page work under the step timeout. */
  readonly run: <A>(work: (page: Page) => Promise<A>) => Effect.Effect<A, SessionLost | PageError>
  /** Why the session was lost, if it was. */
  readonly lost: Effect.Effect<Option.Option<string>>
}

/** The browser service. */
export interface Service {
  /** A fresh isolated context and page, closed with the scope. */
  readonly session: Effect.Effect<Session, BrowserLaunchError, Scope.Scope>
  /** The running browser's process id (none before the first session or after it died). */
  readonly pid: Effect.Effect<Option.Option<number>>
  /** How many times the process has been launched (a relaunch after a crash counts). */
  readonly launches: Effect.Effect<number>
  /** Sessions open now. */
  readonly openSessions: Effect.Effect<number>
  /** The browser's memory now: PSS (KiB) summed over its process tree (`/proc/<pid>/smaps_rollup`), and the count. */
  readonly memory: Effect.Effect<Option.Option<{ readonly pssKiB: number; readonly processes: number }>>
}

interface Running {
  readonly browser: PwBrowser
  readonly pid: number | undefined
}

const launch = (options: BrowserOptions) =>
  Effect.gen(function*() {
    const executablePath = options.executablePath ?? findChromium()
    if (executablePath === undefined) {
      return yield* new BrowserLaunchError({
        message: "no Chromium found: run scripts/ensure-chromium.sh (installs Debian's chromium) or set CHROMIUM_PATH"
      })
    }
    const before = new Set(chromiumChildPids())
    const browser = yield* Effect.tryPromise({
      // Loaded on first launch: importing playwright-core costs over a second, which no other user of the package
      // should pay.
      try: () =>
        import("playwright-core").then(({ chromium }) =>
          chromium.launch({
            executablePath,
            headless: true,
            timeout: options.launchTimeoutMs ?? 30_000,
            args: [
              `--js-flags=--max-old-space-size=${options.maxHeapMiB ?? 256}`,
              "--disable-dev-shm-usage",
              "--disable-gpu",
              "--no-first-run"
            ]
          })
        ),
      catch: (e) =>
        new BrowserLaunchError({
          message: `cannot launch ${executablePath}: ${e instanceof Error ? e.message.split("\n")[0] : String(e)}; ` +
            "check that it runs (`chromium --headless --version`) or set CHROMIUM_PATH"
        })
    })
    const pid = chromiumChildPids().find((p) => !before.has(p))
    return { browser, pid } satisfies Running
  })

const describe = (e: unknown) => (e instanceof Error ? e.message.split("\n")[0] : String(e))

/** Builds the service; the browser closes with the scope. */
export const make = (options: BrowserOptions = {}): Effect.Effect<Service, never, Scope.Scope> =>
  Effect.gen(function*() {
    const lock = yield* Effect.makeSemaphore(1)
    let running: Running | undefined
    let launches = 0
    let open = 0
    let idleTimer: ReturnType<typeof setTimeout> | undefined
    const stepTimeout = Duration.millis(options.stepTimeoutMs ?? 60_000)

    const closeBrowser = (r: Running) =>
      Effect.promise(() => r.browser.close().catch(() => undefined)).pipe(
        Effect.timeoutOption(Duration.seconds(5)),
        Effect.tap(() =>
          Effect.sync(() => {
            // A browser that does not close in time is killed: the process must not outlive its owner.
            if (r.pid !== undefined) {
              try {
                process.kill(r.pid, "SIGKILL")
              } catch {
                // already gone
              }
            }
          })
        )
      )

    const current = lock.withPermits(1)(Effect.suspend(() => {
      if (idleTimer !== undefined) {
        clearTimeout(idleTimer)
        idleTimer = undefined
      }
      // The session counts as open from here, under the lock, so an idle close cannot race its context.
      if (running !== undefined && running.browser.isConnected()) {
        open += 1
        return Effect.succeed(running)
      }
      const dead = running
      running = undefined
      return Effect.zipRight(
        dead === undefined ? Effect.void : closeBrowser(dead),
        Effect.tap(launch(options), (r) =>
          Effect.sync(() => {
            running = r
            launches += 1
            open += 1
          }))
      )
    }))

    const scheduleIdleClose = () => {
      const ms = options.idleCloseMs
      if (ms === undefined || open > 0) return
      idleTimer = setTimeout(() => {
        idleTimer = undefined
        const r = running
        if (open === 0 && r !== undefined) {
          running = undefined
          Effect.runFork(lock.withPermits(1)(closeBrowser(r)))
        }
      }, ms)
      idleTimer.unref()
    }

    const release = () => {
      open -= 1
      scheduleIdleClose()
    }

    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        if (idleTimer !== undefined) clearTimeout(idleTimer)
        const r = running
        running = undefined
        return r === undefined ? Effect.void : closeBrowser(r)
      })
    )

    const openSession = (r: Running): Effect.Effect<Session, BrowserLaunchError, Scope.Scope> =>
      Effect.gen(function*() {
        const context: BrowserContext = yield* Effect.acquireRelease(
          Effect.tryPromise({
            try: () =>
              r.browser.newContext({
                viewport: options.viewport ?? { width: 1280, height: 720 },
                serviceWorkers: "block"
              }),
            catch: (e) => new BrowserLaunchError({ message: `cannot open a browser context: ${describe(e)}` })
          }).pipe(Effect.tapError(() => Effect.sync(release))),
          (c) =>
            Effect.promise(() => c.close().catch(() => undefined)).pipe(
              Effect.timeoutOption(Duration.seconds(5)),
              Effect.zipRight(Effect.sync(release))
            )
        )
        context.setDefaultTimeout(options.actionTimeoutMs ?? 10_000)
        context.setDefaultNavigationTimeout(options.navigationTimeoutMs ?? 30_000)
        const page = yield* Effect.tryPromise({
          try: () => context.newPage(),
          catch: (e) => new BrowserLaunchError({ message: `cannot open a page: ${describe(e)}` })
        })
        let lostReason: string | undefined
        page.on("crash", () => {
          lostReason ??= "the page crashed"
        })
        page.on("close", () => {
          lostReason ??= "the page was closed"
        })
        const isGone = () => lostReason !== undefined || !r.browser.isConnected() || page.isClosed()
        const session: Session = {
          run: (work) =>
            Effect.suspend(() => {
              if (isGone()) {
                return Effect.fail(new SessionLost({ reason: lostReason ?? "the browser process exited" }))
              }
              return Effect.tryPromise({
                try: () => work(page),
                catch: (e): SessionLost | PageError =>
                  isGone()
                    ? new SessionLost({ reason: lostReason ?? "the browser process exited" })
                    : new PageError({ message: describe(e) })
              }).pipe(
                Effect.timeoutFail({
                  duration: stepTimeout,
                  onTimeout: () => {
                    lostReason ??= `the page did not answer within ${Duration.format(stepTimeout)}`
                    return new SessionLost({ reason: lostReason })
                  }
                })
              )
            }),
          lost: Effect.sync(() => (isGone() ? Option.some(lostReason ?? "the browser process exited") : Option.none()))
        }
        return session
      })

    return {
      session: Effect.flatMap(current, openSession),
      pid: Effect.sync(() =>
        running !== undefined && running.browser.isConnected() ? Option.fromNullable(running.pid) : Option.none()
      ),
      launches: Effect.sync(() => launches),
      openSessions: Effect.sync(() => open),
      memory: Effect.sync(() => {
        const pid = running?.pid
        if (pid === undefined || !running?.browser.isConnected()) return Option.none()
        const tree = processTree(pid)
        return Option.some({ pssKiB: tree.reduce((sum, p) => sum + pssKiB(p), 0), processes: tree.length })
      })
    } satisfies Service
  })

/** The browser as a service. */
export class Browser extends Context.Tag("@envtrain/env/Browser")<Browser, Service>() {
  /** One browser for the lifetime of the layer. */
  static readonly layer = (options: BrowserOptions = {}) => Layer.scoped(Browser, make(options))
}

let sharedInstance: Service | undefined

/**
 * The process-wide browser that served and in-process BrowserGym environments share: launched on first use, closed
 * after 30 s without sessions (and by playwright when the process exits).
 */
export const shared = (): Service => {
  if (sharedInstance === undefined) {
    // Its scope is never closed on purpose: the idle close and process exit end the browser.
    sharedInstance = Effect.runSync(
      Effect.flatMap(Scope.make(), (scope) => Scope.extend(make({ idleCloseMs: 30_000 }), scope))
    )
  }
  return sharedInstance
}
