// `envtrain harness serve`'s plain-HTTP Task API (OpenEnv's `/harbor_env/splits`, `/num_tasks`, `/task`,
// `/task_range`): the Harbor definition on env's real OpenEnv server on a loopback port, asked with fetch. Each
// route's shape (HarborTaskRef's fields), Python's slice rules for task_range, the same list as the `list_tasks`
// MCP tool, and every bad input answered with its status and a detail naming the problem. No rollout runs (the
// capture proxy's upstream is a closed port). Live clock.
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Server } from "@envtrain/env"
import { Effect } from "effect"
import * as HarborServe from "../src/HarborServe.js"
import * as HarnessSession from "../src/HarnessSession.js"
import { captureProxy, shippedSuite } from "./fixtures.js"

const call = (url: string, init?: { readonly method?: string; readonly body?: unknown }) =>
  Effect.tryPromise(async () => {
    const response = await fetch(url, {
      method: init?.method ?? (init?.body === undefined ? "GET" : "POST"),
      ...(init?.body === undefined
        ? {}
        : { body: typeof init.body === "string" ? init.body : JSON.stringify(init.body) }),
      headers: { "content-type": "application/json" },
      signal: AbortSignal.timeout(10_000)
    })
    return { status: response.status, body: await response.json() as any }
  })

const serveHarbor = Effect.gen(function*() {
  const suite = yield* shippedSuite
  const proxy = yield* captureProxy("http://127.0.0.1:9")
  const definition = yield* HarborServe.definition({
    suite,
    proxy,
    llmUrl: "http://127.0.0.1:9",
    model: "tiny",
    agents: [HarnessSession.oracleAgent()]
  })
  const server = yield* Server.serve(definition, { port: 0 })
  return { suite, url: `${server.url}/harbor_env` }
})

describe("HarborServe Task API", () => {
  it.scopedLive("splits, num_tasks, task and task_range answer OpenEnv's shapes from the suite", () =>
    Effect.gen(function*() {
      const { suite, url } = yield* serveHarbor
      const n = suite.train.length
      assert.isAbove(n, 5)

      const splits = yield* call(`${url}/splits`)
      assert.deepStrictEqual(splits, {
        status: 200,
        body: [{ name: "train", num_tasks: n }, { name: "held-out", num_tasks: suite.heldOut.length }]
      })

      assert.deepStrictEqual(yield* call(`${url}/num_tasks`, { body: { split: "held-out" } }), {
        status: 200,
        body: { num_tasks: suite.heldOut.length }
      })
      // An empty split is the first (OpenEnv's Harbor reads it as its first dataset).
      assert.deepStrictEqual((yield* call(`${url}/num_tasks`, { body: { split: "" } })).body, { num_tasks: n })

      const task = yield* call(`${url}/task`, { body: { split: "train", index: 2 } })
      assert.strictEqual(task.status, 200)
      assert.deepStrictEqual(task.body, {
        task: {
          index: 2,
          task_id: `train/${suite.train[2].name}`,
          task_name: suite.train[2].name,
          dataset: "train",
          instruction: suite.train[2].instruction
        }
      })
      const heldOut = yield* call(`${url}/task`, { body: { split: "held-out", index: 0 } })
      assert.strictEqual(heldOut.body.task.task_name, suite.heldOut[0].name)
      assert.strictEqual(heldOut.body.task.dataset, "held-out")

      const indices = (body: unknown) =>
        Effect.map(
          call(`${url}/task_range`, { body }),
          (r) => {
            assert.strictEqual(r.status, 200, JSON.stringify(r.body))
            return (r.body.tasks as Array<{ index: number }>).map((t) => t.index)
          }
        )
      // Python's tasks[start:stop]: stop exclusive, clamped, negative from the end, null or missing open.
      assert.deepStrictEqual(yield* indices({ split: "train", start: 2, stop: 5 }), [2, 3, 4])
      assert.deepStrictEqual(yield* indices({ split: "train", start: n - 2, stop: n + 50 }), [n - 2, n - 1])
      assert.deepStrictEqual(yield* indices({ split: "train", start: -2 }), [n - 2, n - 1])
      assert.deepStrictEqual(
        yield* indices({ split: "train", start: 0, stop: -1 }).pipe(Effect.map((l) => l.length)),
        n - 1
      )
      assert.deepStrictEqual(yield* indices({ split: "train", start: 4, stop: 2 }), [])
      assert.deepStrictEqual(yield* indices({ split: "train", start: n + 3, stop: n + 9 }), [])
      assert.deepStrictEqual(yield* indices({ split: "train", start: null, stop: null }), [...Array(n).keys()])
      assert.deepStrictEqual(yield* indices({ split: "train" }), [...Array(n).keys()])

      const range = yield* call(`${url}/task_range`, { body: { split: "train", start: 1, stop: 4 } })
      const whole = yield* call(`${url}/tasks`, { body: { split: "train" } })
      assert.strictEqual(whole.body.env_name, "harbor_env")
      assert.deepStrictEqual(range.body.tasks, whole.body.tasks.slice(1, 4))
      assert.deepStrictEqual(
        range.body.tasks[0],
        (yield* call(`${url}/task`, { body: { split: "train", index: 1 } })).body.task
      )

      // The list_tasks MCP tool reads the same list.
      const listed = yield* call(`${url.replace(/\/harbor_env$/, "")}/mcp`, {
        body: {
          jsonrpc: "2.0",
          id: 1,
          method: "tools/call",
          params: { name: "list_tasks", arguments: { split: "train", start: 1, stop: 4 } }
        }
      })
      assert.deepStrictEqual(JSON.parse(listed.body.result.content[0].text), range.body.tasks)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scopedLive("bad input is refused with its status and a detail naming the problem", () =>
    Effect.gen(function*() {
      const { suite, url } = yield* serveHarbor
      const n = suite.train.length

      // Unknown split: 404 naming the splits there are, on every route that takes one.
      for (const route of ["num_tasks", "task", "task_range", "tasks"]) {
        const r = yield* call(`${url}/${route}`, { body: { split: "test", ...(route === "task" ? { index: 0 } : {}) } })
        assert.strictEqual(r.status, 404, route)
        assert.include(r.body.detail, "unknown split \"test\"")
        assert.include(r.body.detail, "train, held-out")
      }

      // Index outside the split: 400 (OpenEnv's status for IndexError) naming the range.
      for (const index of [n, -1, 10_000]) {
        const r = yield* call(`${url}/task`, { body: { split: "train", index } })
        assert.strictEqual(r.status, 400)
        assert.strictEqual(r.body.detail, `task index ${index} is out of range: train has ${n} tasks (0..${n - 1})`)
      }

      // Bad bodies: 422 with pydantic's entries naming the field.
      const missing = yield* call(`${url}/task`, { body: { split: "train" } })
      assert.strictEqual(missing.status, 422)
      assert.deepStrictEqual(missing.body.detail.map((e: any) => [e.type, e.loc]), [["missing", ["body", "index"]]])
      const noSplit = yield* call(`${url}/num_tasks`, { body: {} })
      assert.deepStrictEqual(noSplit.body.detail.map((e: any) => [e.type, e.loc]), [["missing", ["body", "split"]]])
      const wrongTypes = yield* call(`${url}/task_range`, { body: { split: 3, start: "a", stop: 1.5, extra: true } })
      assert.strictEqual(wrongTypes.status, 422)
      assert.deepStrictEqual(wrongTypes.body.detail.map((e: any) => [e.type, e.loc]), [
        ["string_type", ["body", "split"]],
        ["int_type", ["body", "start"]],
        ["int_from_float", ["body", "stop"]],
        ["extra_forbidden", ["body", "extra"]]
      ])
      const notJson = yield* call(`${url}/task`, { body: "{\"split\": " })
      assert.strictEqual(notJson.status, 422)
      assert.strictEqual(notJson.body.detail[0].type, "json_invalid")
      assert.include(notJson.body.detail[0].ctx.error, "Expecting value")
      const notObject = yield* call(`${url}/task`, { body: [1, 2] })
      assert.strictEqual(notObject.status, 422)
      assert.deepStrictEqual(notObject.body.detail[0].loc, ["body"])
      const empty = yield* call(`${url}/num_tasks`, { method: "POST" })
      assert.strictEqual(empty.status, 422)
      assert.deepStrictEqual(empty.body.detail[0], {
        type: "missing",
        loc: ["body"],
        msg: "Field required",
        input: null
      })

      // Wrong method, another environment's name (OpenEnv's answers).
      assert.deepStrictEqual(yield* call(`${url}/splits`, { body: {} }), {
        status: 405,
        body: { detail: "Method Not Allowed" }
      })
      assert.strictEqual((yield* call(`${url}/task`)).status, 405)
      const other = yield* call(`${url.replace(/harbor_env$/, "echo_env")}/splits`)
      assert.deepStrictEqual(other, { status: 404, body: { detail: "unknown environment 'echo_env'" } })
    }).pipe(Effect.provide(NodeContext.layer)))
})
