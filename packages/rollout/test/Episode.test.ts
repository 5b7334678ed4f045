import { assert, describe, it } from "@effect/vitest"
import { Catch, Echo, Environment } from "@envtrain/env"
import * as ChatTemplate from "@envtrain/text/ChatTemplate"
import { Effect, FastCheck as fc, Layer } from "effect"
import { ChatRenderer, Episode, Policy } from "../src/index.js"
import { catchScript, renderer, tinyModel, toolResponses } from "./fixtures.js"

const echoCall = (message: string) =>
  `<tool_call>\n{"name": "echo", "arguments": {"message": "${message}"}}\n</tool_call>`

const policyLayer = (respond: (ctx: Policy.ScriptContext) => string) =>
  Layer.unwrapEffect(Effect.map(tinyModel, ({ tokenizer }) => Policy.scripted(tokenizer, respond)))

const runEpisode = <S, C>(
  env: Environment.Environment<S, C>,
  row: Environment.Row,
  config: Partial<Episode.EpisodeConfig>,
  respond: (ctx: Policy.ScriptContext) => string,
  thinking = false
) =>
  Effect.scoped(Effect.gen(function*() {
    const live = yield* Environment.episode(env, row)
    return yield* Episode.run({
      prompt: [{ role: "user", content: "Play." }],
      session: Episode.fromEnvironment(live),
      config: { maxCompletionLength: 4096, sampling: { temperature: 1 }, ...config }
    })
  })).pipe(Effect.provide(Layer.merge(renderer(thinking), policyLayer(respond))))

// Bookkeeping invariants every record must satisfy.
const checkLayout = (r: Episode.EpisodeRecord) => {
  assert.strictEqual(r.mask.length, r.completionIds.length)
  assert.strictEqual(r.logprobs.length, r.completionIds.length)
  r.completionIds.forEach((id, i) => {
    assert.strictEqual(r.logprobs[i], r.mask[i] === 1 ? Policy.scriptedLogprob(id) : 0, `position ${i}`)
  })
}

describe("Episode", () => {
  it.effect("plays Catch to the end: masks line up with tokens, state is read", () =>
    Effect.gen(function*() {
      const r = yield* runEpisode(Catch.environment, { seed: 5 }, {}, catchScript)
      checkLayout(r)
      assert.strictEqual(r.stopReason, "no_tool_call")
      assert.isFalse(r.truncated)
      assert.strictEqual(r.finishReason, "stop")
      assert.isTrue((r.state as Catch.State).caught)
      assert.strictEqual(r.toolCallCount, (r.state as Catch.State).steps)
      assert.strictEqual(r.toolFailureCount, 0)
      assert.strictEqual(r.turns, r.toolCallCount + 1)
      // messages: prompt, then assistant/tool alternating, ending on the final assistant answer.
      assert.deepStrictEqual(r.messages.slice(r.promptMessageCount).map((m) => m.role), [
        ...Array.from({ length: r.toolCallCount }, () => ["assistant", "tool"]).flat(),
        "assistant"
      ])
      assert.include(r.messages[0].content, "Ball:")
    }))

  it.effect("tokens never drift: the whole conversation re-renders to prompt + completion ids", () =>
    Effect.gen(function*() {
      const { template, tokenizer } = yield* tinyModel
      for (const seed of [1, 2, 3]) {
        const r = yield* runEpisode(Catch.environment, { seed }, {}, catchScript)
        const tools = Catch.environment.tools.map((t) => t.definition as unknown as ChatTemplate.ToolDefinition)
        const text = yield* template.render({ messages: r.messages, tools, enableThinking: false })
        const ids = tokenizer.encode(text)
        const sampled = [...r.promptIds, ...r.completionIds]
        // The template closes the last turn with "<|im_end|>\n"; the model's turn ends at "<|im_end|>".
        assert.deepStrictEqual(ids.slice(0, sampled.length), sampled)
        assert.strictEqual(tokenizer.decode(ids.slice(sampled.length)), "\n")
      }
    }))

  it.effect("each request holds the prompt and every token before it; the live array only ever grows", () =>
    Effect.gen(function*() {
      const { tokenizer } = yield* tinyModel
      const seen: Array<{ readonly ids: ReadonlyArray<number>; readonly copy: ReadonlyArray<number> }> = []
      const inner = Policy.scripted(tokenizer, catchScript)
      const copying = Layer.effect(
        Policy.Policy,
        Effect.map(Effect.provide(Policy.Policy, inner), (policy) => ({
          generate: (request: Policy.GenerateRequest) => {
            seen.push({ ids: request.promptIds, copy: [...request.promptIds] })
            return policy.generate(request)
          }
        }))
      )
      const r = yield* Effect.scoped(Effect.gen(function*() {
        const live = yield* Environment.episode(Catch.environment, { seed: 4 })
        return yield* Episode.run({
          prompt: [{ role: "user", content: "Play." }],
          session: Episode.fromEnvironment(live),
          config: { maxCompletionLength: 4096, sampling: { temperature: 1 } }
        })
      })).pipe(Effect.provide(Layer.merge(renderer(false), copying)))
      assert.isAbove(seen.length, 2)
      const all = [...r.promptIds, ...r.completionIds]
      for (let i = 0; i < seen.length; i++) {
        // What the policy saw during its call: the prompt plus everything generated and appended before it.
        assert.deepStrictEqual(seen[i].copy, all.slice(0, seen[i].copy.length))
        if (i > 0) assert.isAbove(seen[i].copy.length, seen[i - 1].copy.length)
      }
      // The first turn gets the renderer's prompt array, which is shared and must never grow; later turns get the
      // episode's own live array (a copy of the prompt, extended in place).
      assert.deepStrictEqual(seen[0].ids, r.promptIds)
      assert.notStrictEqual(seen[1].ids, seen[0].ids)
      for (let i = 2; i < seen.length; i++) assert.strictEqual(seen[i].ids, seen[1].ids)
    }))

  it("Progress.contextView extends one array with direct pushes and appended turns, in order", () => {
    const p = new Episode.Progress<number>({ promptIndex: 0, generation: 0, row: {}, envSeed: undefined })
    const prompt = [100, 101]
    p.promptIds = prompt
    assert.strictEqual(p.contextView(), prompt)
    p.completionIds.push(1)
    p.mask.push(1)
    p.logprobs.push(-0.5)
    p.appendModel([2, 3], [-0.25])
    const view = p.contextView()
    assert.deepStrictEqual(view, [100, 101, 1, 2, 3])
    assert.deepStrictEqual(prompt, [100, 101])
    p.appendTool([4, 5])
    assert.strictEqual(p.contextView(), view)
    assert.deepStrictEqual(view, [100, 101, 1, 2, 3, 4, 5])
    p.flush()
    p.completionIds.push(6)
    p.mask.push(0)
    p.logprobs.push(0)
    p.appendModel([7], [-1])
    assert.deepStrictEqual(p.contextView(), [100, 101, 1, 2, 3, 4, 5, 6, 7])
    assert.deepStrictEqual(p.contextView(), p.context())
    const r = p.finish()
    assert.deepStrictEqual(r.mask, [1, 1, 1, 0, 0, 0, 1])
    assert.deepStrictEqual(r.logprobs, [-0.5, -0.25, 0, 0, 0, 0, -1])
    // A new prompt starts a new live array.
    p.promptIds = [9]
    assert.deepStrictEqual(p.contextView(), [9, 1, 2, 3, 4, 5, 6, 7])
  })

  it("Progress joins appended turns after what was pushed directly, in order", () => {
    const p = new Episode.Progress<number>({ promptIndex: 0, generation: 0, row: {}, envSeed: undefined })
    p.promptIds = [100, 101]
    p.completionIds.push(1)
    p.mask.push(1)
    p.logprobs.push(-0.5)
    p.appendModel([2, 3], [-0.25])
    p.appendTool([4])
    assert.strictEqual(p.completionLength, 4)
    assert.deepStrictEqual(p.context(), [100, 101, 1, 2, 3, 4])
    const r = p.finish()
    assert.deepStrictEqual(r.completionIds, [1, 2, 3, 4])
    assert.deepStrictEqual(r.mask, [1, 1, 1, 0])
    // A logprob the policy did not give reads 0, as the loop always did.
    assert.deepStrictEqual(r.logprobs, [-0.5, -0.25, 0, 0])
    assert.strictEqual(p.completionLength, 4)
    p.appendTool([5])
    assert.deepStrictEqual(p.finish().completionIds, [1, 2, 3, 4, 5])
  })

  it("Progress refuses token ids pushed without their mask and logprob, saying what to push", () => {
    const p = new Episode.Progress<number>({ promptIndex: 0, generation: 0, row: {}, envSeed: undefined })
    p.completionIds.push(1)
    p.appendTool([2])
    assert.throws(() => p.finish(), /same length \(they are 1, 0 and 0\); push one mask and one logprob/)
  })

  it.effect("mask 0 covers exactly the tool suffixes", () =>
    Effect.gen(function*() {
      const { tokenizer } = yield* tinyModel
      const r = yield* runEpisode(Echo.environment, {}, { maxToolCallingIterations: 2 }, () => echoCall("hi"))
      const masked = r.completionIds.filter((_, i) => r.mask[i] === 0)
      const suffix = "\n<|im_start|>user\n<tool_response>\nhi\n</tool_response><|im_end|>\n" +
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
      assert.strictEqual(tokenizer.decode(masked), suffix + suffix)
      const model = r.completionIds.filter((_, i) => r.mask[i] === 1)
      assert.strictEqual(tokenizer.decode(model), (echoCall("hi") + "<|im_end|>").repeat(3))
    }))

  it.effect("maxToolCallingIterations is exact; the last turn's calls are not executed", () =>
    Effect.gen(function*() {
      for (const k of [0, 1, 3]) {
        const r = yield* runEpisode(Echo.environment, {}, { maxToolCallingIterations: k }, () => echoCall("x"))
        checkLayout(r)
        assert.strictEqual(r.turns, k + 1)
        assert.strictEqual(r.toolCallCount, k)
        assert.strictEqual((r.state as Echo.State).echoes, k)
        assert.strictEqual(r.stopReason, "max_tool_calling_iterations")
        assert.isFalse(r.truncated)
      }
    }))

  it.effect.prop(
    "the completion budget is exact over all turns, tool tokens included",
    [fc.integer({ min: 1, max: 260 })],
    ([budget]) =>
      Effect.gen(function*() {
        const r = yield* runEpisode(Echo.environment, {}, { maxCompletionLength: budget }, () => echoCall("abc"))
        checkLayout(r)
        assert.isAtMost(r.completionIds.length, budget)
        assert.strictEqual(r.stopReason, "completion_budget")
        if (r.truncated) {
          // Cut inside a turn (or right after a suffix): every token of the budget was used.
          assert.strictEqual(r.completionIds.length, budget)
          assert.strictEqual(r.finishReason, "length")
        } else {
          // The next tool results did not fit and were dropped: it ends on the model's end-of-turn token.
          assert.strictEqual(r.mask[r.mask.length - 1], 1)
          assert.strictEqual(r.messages[r.messages.length - 1].role, "assistant")
        }
        return true
      }),
    { fastCheck: { numRuns: 25 } }
  )

  it.effect("maxModelLength stops before the context window is reached", () =>
    Effect.gen(function*() {
      const r = yield* runEpisode(Echo.environment, {}, { maxModelLength: 600 }, () => echoCall("abc"))
      assert.isAtMost(r.promptIds.length + r.completionIds.length, 600)
      assert.strictEqual(r.stopReason, "context_window")
    }))

  it.effect("malformed and unknown calls are answered, counted per tool, and the episode goes on", () =>
    Effect.gen(function*() {
      const turns = [
        "<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"message\": }\n</tool_call>\n" +
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>\n" + echoCall("ok"),
        "<tool_call>\n{\"name\": \"shout\", \"arguments\": {}}\n</tool_call>\n" +
        "<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"message\": 3}}\n</tool_call>",
        "Done."
      ]
      // Turn k is chosen by how many tool responses the context holds (0, then 3, then 5).
      const turnOf: Record<number, number> = { 0: 0, 3: 1, 5: 2 }
      const r = yield* runEpisode(Echo.environment, {}, {}, ({ text }) => turns[turnOf[toolResponses(text)]])
      checkLayout(r)
      assert.deepStrictEqual(r.toolCalls.map((c) => [c.name, c.status, c.reason]), [
        ["echo", "parse_failure", "malformed_json"],
        [undefined, "parse_failure", "missing_name"],
        ["echo", "success", undefined],
        ["shout", "failure", "unknown_tool"],
        ["echo", "failure", "invalid_arguments"]
      ])
      assert.deepStrictEqual(r.toolStats, {
        echo: { calls: 3, failures: 2 },
        "(unnamed)": { calls: 1, failures: 1 },
        shout: { calls: 1, failures: 1 }
      })
      assert.strictEqual(r.toolCallCount, 5)
      assert.strictEqual(r.toolFailureCount, 4)
      assert.strictEqual(r.stopReason, "no_tool_call")
      const toolTexts = r.messages.filter((m) => m.role === "tool").map((m) => m.content)
      assert.include(toolTexts[0], "not valid JSON")
      assert.include(toolTexts[1], "no tool name")
      assert.strictEqual(toolTexts[2], "ok")
      assert.strictEqual(toolTexts[3], "{'error': 'Tool shout not found.'}")
      // Only well-formed calls appear in the assistant message.
      assert.deepStrictEqual(r.messages[r.promptMessageCount].tool_calls?.map((c) => c.function.name), ["echo"])
    }))

  it.effect("enable_thinking: reasoning is split out and the suffix ends with a bare generation prompt", () =>
    Effect.gen(function*() {
      const { tokenizer } = yield* tinyModel
      const r = yield* runEpisode(
        Echo.environment,
        {},
        { maxToolCallingIterations: 1 },
        ({ text }) => `<think>\nI should echo.\n</think>\n\n${toolResponses(text) === 0 ? echoCall("hi") : "Done."}`,
        true
      )
      checkLayout(r)
      const assistant = r.messages[r.promptMessageCount]
      assert.strictEqual(assistant.reasoning_content, "I should echo.")
      assert.strictEqual(r.messages[r.messages.length - 1].content, "Done.")
      assert.isTrue(tokenizer.decode(r.promptIds).endsWith("<|im_start|>assistant\n"))
      const masked = r.completionIds.filter((_, i) => r.mask[i] === 0)
      assert.isTrue(tokenizer.decode(masked).endsWith("</tool_response><|im_end|>\n<|im_start|>assistant\n"))
    }))

  it.effect("a template that is not prefix-stable fails loudly", () =>
    Effect.gen(function*() {
      const { tokenizer } = yield* tinyModel
      // Qwen3's own template drops the empty think block of an assistant turn once it is no longer last.
      const unstable = ChatTemplate.QWEN3_STYLE_TEMPLATE.replace(
        "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') -}}",
        "{%- if loop.last -%}{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + content -}}{%- else -%}{{- '<|im_start|>assistant\\n' + content -}}{%- endif -%}"
      )
      assert.notStrictEqual(unstable, ChatTemplate.QWEN3_STYLE_TEMPLATE)
      const template = yield* ChatTemplate.ChatTemplate.fromString(unstable)
      const r = ChatRenderer.make({ tokenizer, template, enableThinking: false })
      const error = yield* Effect.flip(r.toolSuffixIds([{ role: "tool", content: "x" }]))
      assert.strictEqual(error._tag, "TemplateNotPrefixStable")
      assert.include(error.message, "not prefix-stable")
    }))
})
