// OpenEnv's Task API on env's server, for any definition: served under the environment's name when the definition
// carries tasks, 501 (OpenEnv's text) when it does not; the provider's lookups and Python's slice rules directly.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as Server from "../src/Server.js"
import * as TaskApi from "../src/TaskApi.js"
import { counter } from "./fixtures/Counter.js"
import { http } from "./fixtures/Raw.js"

const post = (url: string, body: unknown) => http(url, { method: "POST", body: JSON.stringify(body) })

const provider = TaskApi.make([
  { name: "train", tasks: ["a", "b", "c", "d"] },
  { name: "test", descriptor: { name: "test", type: "test" }, tasks: [{ q: 1 }] }
])

describe("TaskApi", () => {
  it("looks up splits and tasks; range is Python's slice", () => {
    assert.deepStrictEqual(TaskApi.descriptors(provider), [{ name: "train", num_tasks: 4 }, {
      name: "test",
      type: "test"
    }])
    assert.deepStrictEqual(TaskApi.task(provider, "train", 3), Either.right("d"))
    const out = TaskApi.task(provider, "train", 4)
    assert.isTrue(Either.isLeft(out) && out.left._tag === "TaskIndexOutOfRange")
    const noDefault = TaskApi.split(provider, "")
    assert.isTrue(
      Either.isLeft(noDefault) && noDefault.left.message === "unknown split \"\"; this server has train, test"
    )
    assert.deepStrictEqual(
      TaskApi.split(TaskApi.make(provider.splits, { defaultSplit: "test" }), "").pipe(
        Either.map((s) => s.name)
      ),
      Either.right("test")
    )
    const slice = (start?: number | null, stop?: number | null) =>
      Either.getOrThrow(TaskApi.range(provider, "train", start, stop))
    assert.deepStrictEqual(slice(1, 3), ["b", "c"])
    assert.deepStrictEqual(slice(-3, -1), ["b", "c"])
    assert.deepStrictEqual(slice(-10, 10), ["a", "b", "c", "d"])
    assert.deepStrictEqual(slice(null, 2), ["a", "b"])
    assert.deepStrictEqual(slice(3, 1), [])
  })

  it.scopedLive("is served under the environment's name when the definition has tasks, 501 when not", () =>
    Effect.gen(function*() {
      const plain = yield* Server.serve(counter(), { port: 0 })
      assert.deepStrictEqual((yield* http(`${plain.url}/list_environments`)).body, ["counter_env"])
      assert.deepStrictEqual(yield* http(`${plain.url}/counter_env/splits`), {
        status: 501,
        body: { detail: "list_splits is not supported for this environment" }
      })
      assert.deepStrictEqual(yield* post(`${plain.url}/counter_env/task_range`, { split: "train" }), {
        status: 501,
        body: { detail: "get_task_range is not supported for this environment" }
      })
      const openapi = (yield* http(`${plain.url}/openapi.json`)).body
      assert.includeMembers(Object.keys(openapi.paths), ["/list_environments", "/{env_name}/task_range"])

      const withTasks = yield* Server.serve({ ...counter(), tasks: provider }, { port: 0 })
      // OpenEnv compares the name case-insensitively.
      assert.deepStrictEqual((yield* http(`${withTasks.url}/Counter_Env/splits`)).body, TaskApi.descriptors(provider))
      assert.deepStrictEqual((yield* post(`${withTasks.url}/counter_env/tasks`, { split: "test" })).body, {
        tasks: [{ q: 1 }],
        env_name: "counter_env"
      })
      assert.deepStrictEqual((yield* post(`${withTasks.url}/counter_env/task`, { split: "train", index: 1 })).body, {
        task: "b"
      })
      assert.deepStrictEqual(
        (yield* post(`${withTasks.url}/counter_env/task_range`, { split: "train", start: -2, stop: null })).body,
        { tasks: ["c", "d"] }
      )
      const unknown = yield* post(`${withTasks.url}/counter_env/num_tasks`, { split: "" })
      assert.deepStrictEqual(unknown, {
        status: 404,
        body: { detail: "unknown split \"\"; this server has train, test" }
      })
      assert.strictEqual((yield* http(`${withTasks.url}/other_env/splits`)).status, 404)
      // The protocol's own routes are unchanged.
      assert.deepStrictEqual((yield* http(`${withTasks.url}/health`)).body, { status: "healthy" })
    }))
})
