import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Option, Scope } from "effect"
import { Browser, BrowserGym, Client, Environment, Registry } from "../src/index.js"
import type { StepResult } from "../src/OpenEnv.js"

// One real Chromium for the whole file (launched on first use, closed when the file ends).
const fileScope = Effect.runSync(Scope.make())
const browser = Effect.runSync(Scope.extend(Browser.make(), fileScope))
afterAll(() => Effect.runPromise(Scope.close(fileScope, Exit.void)))
const definition = BrowserGym.openEnvFor({ browser })

const view = (r: StepResult) => ({
  goal: r.observation.goal as string,
  axtree: r.observation.axtree_txt as string
})

/** Plays `task` with the scripted solver at the OpenEnv level. */
const solve = (task: string, seed: number) =>
  Effect.scoped(Effect.gen(function*() {
    const instance = yield* definition.make
    let last = yield* instance.reset({ seed, task_name: task })
    const actions: Array<string> = []
    for (let i = 0; i < 10 && !last.done; i++) {
      const action = BrowserGym.solveStep(task, view(last))
      if (action === undefined) break
      actions.push(action)
      last = yield* instance.step({ action_str: action })
      assert.isFalse(last.observation.last_action_error, `${task}: ${action}: ${String(last.observation.error)}`)
    }
    return { last, actions, state: yield* instance.state }
  }))

describe("BrowserGym (OpenEnv level, real Chromium)", () => {
  it("ships at least 10 MiniWoB++ tasks under MiniWoB's names", () => {
    for (
      const name of [
        "click-test",
        "click-button",
        "click-link",
        "enter-text",
        "focus-text",
        "click-checkboxes",
        "choose-list",
        "login-user",
        "click-tab",
        "navigate-tree",
        "click-dialog"
      ]
    ) assert.include(BrowserGym.TASKS, name)
  })

  it.live(
    "the scripted solver gets reward 1 on every task (a seed each, the task's own)",
    () =>
      Effect.gen(function*() {
        for (const [i, task] of BrowserGym.TASKS.entries()) {
          for (const seed of [i + 1]) {
            const { actions, last, state } = yield* solve(task, seed)
            assert.isTrue(last.done, `${task} seed ${seed}: not done after ${actions.join("; ")}`)
            assert.strictEqual(last.reward, 1, `${task} seed ${seed}: ${actions.join("; ")}`)
            assert.strictEqual(state.cum_reward, 1)
            assert.strictEqual(state.task_name, task)
            assert.strictEqual(state.step_count, actions.length)
          }
        }
      }),
    { timeout: 90_000 }
  )

  it.live("a wrong action gets reward 0 and ends the episode", () =>
    Effect.gen(function*() {
      const checked: Array<string> = []
      for (const task of BrowserGym.TASKS) {
        const result = yield* Effect.scoped(Effect.gen(function*() {
          const instance = yield* definition.make
          const first = yield* instance.reset({ seed: 3, task_name: task })
          const wrong = BrowserGym.wrongStep(task, view(first))
          if (wrong === undefined) return undefined
          let last = yield* instance.step({ action_str: wrong })
          // A wrong first move may take two actions (select the wrong option, then submit).
          if (!last.done) {
            last = yield* instance.step({ action_str: BrowserGym.wrongStep(task, view(last)) ?? "noop(0)" })
          }
          return last
        }))
        if (result === undefined) continue
        checked.push(task)
        assert.strictEqual(result.reward, 0, task)
        if (task !== "click-test") assert.isTrue(result.done, task)
      }
      assert.isAtLeast(checked.length, 10)
    }), { timeout: 60_000 })

  it.live(
    "the observation has the goal, bids in the tree and the HTML, the URL, and a screenshot on request",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const instance = yield* BrowserGym.openEnvFor({ browser, screenshot: true }).make
        const first = yield* instance.reset({ seed: 7, task_name: "click-button" })
        const o = first.observation
        assert.match(o.goal as string, /^Click on the "\w+" button\.$/)
        assert.match(o.axtree_txt as string, /\[\d+\] button '\w+'/)
        assert.match(o.pruned_html as string, /<button bid="\d+"/)
        assert.strictEqual(o.text, o.axtree_txt)
        assert.match(o.url as string, /^http:\/\/127\.0\.0\.1:\d+\/miniwob\/click-button\.html\?seed=7$/)
        assert.isFalse(o.last_action_error)
        const shot = o.screenshot as ReadonlyArray<ReadonlyArray<ReadonlyArray<number>>>
        assert.strictEqual(shot.length, 720)
        assert.strictEqual(shot[0].length, 1280)
        assert.strictEqual(shot[0][0].length, 3)
        assert.isTrue(shot.flat().some((px) => px[0] !== px[2]), "the yellow query bar is in the picture")
        const state = yield* instance.state
        assert.strictEqual(state.benchmark, "miniwob")
        assert.strictEqual(state.task_id, "browsergym/miniwob.click-button")
        assert.strictEqual(state.goal, o.goal)
        // The same seed is the same instance; another seed another one.
        const again = yield* instance.reset({ seed: 7, task_name: "click-button" })
        assert.strictEqual(again.observation.goal, o.goal)
        assert.strictEqual(again.observation.axtree_txt, o.axtree_txt)
      })),
    { timeout: 30_000 }
  )

  it.live(
    "bad action strings come back as last_action_error naming the fix, reward 0, not done",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const instance = yield* definition.make
        yield* instance.reset({ seed: 1, task_name: "click-test" })
        const cases: ReadonlyArray<readonly [string, RegExp]> = [
          ["clik('3')", /unknown action 'clik': use one of .*click\(bid/],
          ["click(13)", /element ids are strings: click\('13'\)/],
          ["click('999')", /no element has bid '999': use a bid shown in brackets/],
          ["fill('3')", /fill is missing 'value': write fill\(bid, value\)/],
          ["click('3'", /missing '\)'/],
          ["", /empty action/],
          ["goto(https://x)", /quote strings/]
        ]
        for (const [action, pattern] of cases) {
          const r = yield* instance.step({ action_str: action })
          assert.isTrue(r.observation.last_action_error, action)
          assert.match(r.observation.error as string, pattern, action)
          assert.strictEqual(r.reward, 0)
          assert.isFalse(r.done)
        }
        // The episode goes on after the errors.
        const first = yield* instance.reset({ seed: 1 })
        const fixed = yield* instance.step({ action_str: BrowserGym.solveStep("click-test", view(first))! })
        assert.strictEqual(fixed.reward, 1)
        const unknown = yield* Effect.exit(instance.reset({ task_name: "no-such-task" }))
        assert.isTrue(Exit.isFailure(unknown))
        assert.match(
          String(Exit.isFailure(unknown) && unknown.cause),
          /unknown task 'no-such-task': use one of click-test/
        )
      })),
    { timeout: 30_000 }
  )
})

describe("BrowserGym (TRL's tools)", () => {
  const env = BrowserGym.environmentFor({ browser })

  it.live("the tool solver wins the clicking and typing tasks; reward 1", () =>
    Effect.gen(function*() {
      for (const task of ["click-test", "click-button", "click-link", "enter-text", "login-user", "click-dialog"]) {
        const result = yield* Environment.run(env, { seed: 5, task }, BrowserGym.solver({ task }))
        assert.isTrue(result.state.success, task)
        assert.strictEqual(BrowserGym.reward(result.state), 1, task)
        assert.match(Option.getOrElse(result.observation, () => ""), /^Goal: .*\n\nPage structure:\n/)
      }
    }), { timeout: 60_000 })

  it.live(
    "taskErrorRates: always wrong on the tasks it names, the errorRate (here none) elsewhere",
    () =>
      Effect.gen(function*() {
        const player = BrowserGym.solver({ taskErrorRates: { "click-dialog": 1, "click-test-2": 1 } })
        for (
          const [task, wins] of [["click-dialog", false], ["click-test-2", false], ["click-button", true]] as const
        ) {
          for (const seed of [1, 2]) {
            const result = yield* Environment.run(env, { seed, task }, player)
            assert.strictEqual(result.state.success, wins, `${task} seed ${seed}`)
            assert.isTrue(result.state.done, `${task} seed ${seed}: one click ends it`)
          }
        }
      }),
    { timeout: 60_000 }
  )

  it("taskErrorRates naming no task, or a rate outside [0, 1], is refused naming it", () => {
    assert.throws(
      () => BrowserGym.solver({ taskErrorRates: { "click-dialogue": 0.5 } }),
      /unknown task 'click-dialogue'/
    )
    assert.throws(() => BrowserGym.solver({ taskErrorRates: { "click-dialog": 1.5 } }), /click-dialog.*\[0, 1\]/)
  })

  it.live("after the end a tool says Episode is done.; a wrong click scores 0", () =>
    Effect.gen(function*() {
      const result = yield* Environment.run(env, { seed: 2, task: "click-button" }, (episode) =>
        Effect.gen(function*() {
          const text = Option.getOrElse(episode.observation, () => "")
          const wrong = BrowserGym.wrongStep("click-button", {
            goal: /^Goal: (.*)$/m.exec(text)![1],
            axtree: text.split("Page structure:\n")[1]
          })!
          yield* episode.call("click", { bid: /'(\d+)'/.exec(wrong)![1] })
          const after = yield* episode.call("noop", {})
          assert.strictEqual(after._tag, "Failure")
          assert.include(after.text, "Episode is done.")
        }))
      assert.isTrue(result.state.done)
      assert.strictEqual(BrowserGym.reward(result.state), 0)
    }), { timeout: 30_000 })
})

describe("Browser (crash)", () => {
  it.live(
    "a SIGKILLed browser loses only the open episodes (unscoreable); later sessions relaunch it",
    () =>
      Effect.gen(function*() {
        const ownScope = yield* Scope.make()
        const own = yield* Scope.extend(Browser.make(), ownScope)
        const crashEnv = BrowserGym.environmentFor({ browser: own })
        const openDef = BrowserGym.openEnvFor({ browser: own })
        const outcome = yield* Effect.scoped(Effect.gen(function*() {
          const a = yield* openDef.make
          const episode = yield* Environment.episode(crashEnv, { seed: 1, task: "click-test" })
          yield* a.reset({ seed: 1, task_name: "click-button" })
          const pid = Option.getOrThrow(yield* own.pid)
          process.kill(pid, "SIGKILL")
          // Wait until the process is gone (the pipe closes).
          for (let i = 0; i < 100 && Option.isSome(yield* own.pid); i++) yield* Effect.sleep("50 millis")
          const step = yield* Effect.exit(a.step({ action_str: "click('1')" }))
          const call = yield* episode.call("click", { bid: "1" })
          return { step, call, state: yield* episode.state }
        }))
        assert.isTrue(Exit.isFailure(outcome.step))
        assert.match(String(Exit.isFailure(outcome.step) && outcome.step.cause), /browser session lost/)
        assert.strictEqual(outcome.call._tag, "Failure")
        assert.include(outcome.call.text, "browser session lost")
        assert.isNull(BrowserGym.reward(outcome.state), "a lost episode is unscoreable, never 0")
        assert.isNotNull(outcome.state.lost)
        // A later session works on a relaunched browser.
        const later = yield* Environment.run(
          crashEnv,
          { seed: 4, task: "click-test" },
          BrowserGym.solver({ task: "click-test" })
        )
        assert.strictEqual(BrowserGym.reward(later.state), 1)
        assert.strictEqual(yield* own.launches, 2)
        yield* Scope.close(ownScope, Exit.void)
      }),
    { timeout: 60_000 }
  )
})

describe("Browser (hung page)", () => {
  it.live(
    "a page that stops answering past the step timeout loses its session; the next reset works",
    () =>
      Effect.gen(function*() {
        const ownScope = yield* Scope.make()
        const own = yield* Scope.extend(Browser.make({ actionTimeoutMs: 1000, stepTimeoutMs: 3000 }), ownScope)
        const instance = yield* Scope.extend(BrowserGym.openEnvFor({ browser: own }).make, ownScope)
        yield* instance.reset({ seed: 1, task_name: "click-test" })
        const hung = yield* Effect.exit(
          instance.step({ action_str: "goto('data:text/html,<script>for(;;){}</script>')" })
        )
        assert.isTrue(Exit.isFailure(hung))
        assert.match(
          String(Exit.isFailure(hung) && hung.cause),
          /browser session lost: the page did not answer within 3s/
        )
        const again = yield* instance.reset({ seed: 2, task_name: "click-test" })
        const won = yield* instance.step({ action_str: BrowserGym.solveStep("click-test", view(again))! })
        assert.strictEqual(won.reward, 1)
        assert.strictEqual(yield* own.launches, 1, "the browser itself survived")
        yield* Scope.close(ownScope, Exit.void)
      }),
    { timeout: 60_000 }
  )
})

describe("BrowserGym served (envtrain serve browsergym --task …)", () => {
  it.live(
    "Registry.serve with a task serves browsergym_env; the typed remote plays it to reward 1",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const server = yield* Registry.serve("browsergym", { port: 0 }, { task: "click-link" })
        const entry = Registry.builtins.browsergym
        const remote = entry.remote(server.url)
        const won = yield* Environment.run(
          remote,
          { seed: 3, task: "click-link" },
          BrowserGym.solver({ task: "click-link" })
        )
        assert.strictEqual(entry.reward(won.state), 1)
        // The served default task is --task's: a plain reset plays click-link.
        const client = yield* Client.make({ url: server.url })
        const first = yield* client.reset({ seed: 1 })
        assert.match(first.observation.goal as string, /^Click on the link "\w+"\.$/)
        const state = yield* client.state
        assert.strictEqual(state.task_name, "click-link")
        const wrong = yield* client.step({ action_str: BrowserGym.wrongStep("click-link", view(first))! })
        assert.strictEqual(wrong.reward, 0)
        assert.isTrue(wrong.done)
      })),
    { timeout: 60_000 }
  )

  it.effect("a task the entry lacks, or a variant given to an entry without variants, is refused naming the flag", () =>
    Effect.gen(function*() {
      const unknown = yield* Effect.flip(Effect.scoped(Registry.serve("browsergym", { port: 0 }, { task: "fly" })))
      assert.match(unknown.message, /no task 'fly': give --task one of click-test/)
      const catchTask = yield* Effect.flip(Effect.scoped(Registry.serve("catch", { port: 0 }, { task: "click-test" })))
      assert.match(catchTask.message, /environment 'catch': has no variants: drop --task/)
    }))
})
