// Golden wire transcripts from the OpenEnv reference (openenv-protocol.md §2.3, §4.1, §4.2), over real sockets.
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Catch from "../src/Catch.js"
import * as Echo from "../src/Echo.js"
import * as Server from "../src/Server.js"
import * as Wordle from "../src/Wordle.js"
import { raw } from "./fixtures/Raw.js"

const wsUrl = (s: Server.RunningServer) => s.url.replace("http://", "ws://") + "/ws"

describe("golden wire transcripts", () => {
  it.scopedLive("Catch (openspiel_env)", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(Catch.openEnv, { port: 0 })
      const c = yield* raw(wsUrl(s))
      yield* c.sendText(`{"type":"reset","data":{}}`)
      const reset = yield* c.next
      assert.deepStrictEqual(Object.keys(reset), ["type", "data"])
      assert.deepStrictEqual(Object.keys(reset.data), ["observation", "reward", "done"])
      const obs = reset.data.observation
      assert.deepStrictEqual(Object.keys(obs), [
        "info_state",
        "legal_actions",
        "game_phase",
        "current_player_id",
        "opponent_last_action"
      ])
      assert.strictEqual(obs.info_state.length, 50)
      assert.strictEqual(obs.info_state.slice(0, 5).filter((v: number) => v === 1).length, 1)
      assert.deepStrictEqual(obs.info_state.slice(45), [0, 0, 1, 0, 0])
      assert.deepStrictEqual([obs.legal_actions, obs.game_phase, obs.current_player_id, obs.opponent_last_action], [
        [0, 1, 2],
        "initial",
        0,
        null
      ])
      assert.deepStrictEqual([reset.data.reward, reset.data.done], [null, false])

      yield* c.sendText(`{"type":"step","data":{"action_id":2,"game_name":"catch","game_params":{}}}`)
      const step = yield* c.next
      assert.strictEqual(step.type, "observation")
      assert.strictEqual(step.data.observation.game_phase, "playing")
      assert.deepStrictEqual(step.data.observation.info_state.slice(45), [0, 0, 0, 1, 0])
      assert.deepStrictEqual([step.data.reward, step.data.done], [0, false])

      yield* c.sendText(`{"type":"state"}`)
      const state = yield* c.next
      assert.strictEqual(state.type, "state")
      const { episode_id, ...rest } = state.data
      assert.isString(episode_id)
      assert.deepStrictEqual(rest, {
        step_count: 1,
        game_name: "catch",
        agent_player: 0,
        opponent_policy: "random",
        game_params: {},
        num_players: 1
      })
      yield* c.sendText(`{"type":"close"}`)
      assert.strictEqual(yield* c.closed, 1000)
    }))

  it.scopedLive("Wordle (textarena_env), secret 'jewel'", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(Wordle.openEnv, { port: 0 })
      const c = yield* raw(wsUrl(s))
      yield* c.send({ type: "reset", data: { secret: "jewel" } })
      const reset = yield* c.next
      const prompt =
        "You are Playing Wordle.\nA secret 5-letter word has been chosen. You have 6 attempts to guess it.\n" +
        "For each guess, wrap your word in square brackets (e.g., '[apple]').\n" +
        "Feedback for each letter will be given as follows:\n" +
        "  - G (green): correct letter in the correct position\n" +
        "  - Y (yellow): letter exists in the word but in the wrong position\n" +
        "  - X (wrong): letter is not in the word\nEnter your guess to begin.\n"
      assert.deepStrictEqual(reset.data.observation.messages, [{
        sender_id: -1,
        content: "\n[GAME] " + prompt,
        category: "MESSAGE"
      }])
      assert.strictEqual(reset.data.observation.prompt, ("\n[GAME] " + prompt).trim())
      assert.deepStrictEqual([reset.data.reward, reset.data.done], [0, false])

      yield* c.send({ type: "step", data: { message: "crane" } })
      const crane = yield* c.next
      const afterCrane = crane.data.observation.messages[0].content as string
      assert.isTrue(afterCrane.endsWith(
        "Enter your guess to begin.\n\n[GAME] [crane]\n[GAME] You submitted [crane].\nFeedback:\nC R A N E\nX X X X Y\nYou have 5 guesses left."
      ))
      assert.deepStrictEqual([crane.data.reward, crane.data.done], [0, false])

      yield* c.send({ type: "step", data: { message: "[xyzzy]" } })
      const xyzzy = yield* c.next
      assert.strictEqual(
        (xyzzy.data.observation.messages[0].content as string).slice(afterCrane.length),
        "\n[GAME] [xyzzy]\n[GAME] You attempted an invalid move. Reason: 'xyzzy' is not an English word. Please resubmit a valid move and remember to follow the game rules to avoid penalties."
      )
      assert.deepStrictEqual([xyzzy.data.reward, xyzzy.data.done], [0, false])

      yield* c.send({ type: "step", data: { message: "hello there" } })
      const last = yield* c.next
      assert.deepStrictEqual([last.data.reward, last.data.done], [0.1, true])
      assert.notProperty(last.data.observation, "metadata")
    }))

  it.scopedLive("Echo: MCP call_tool step and the legacy echo", () =>
    Effect.gen(function*() {
      const mcp = yield* Server.serve(Echo.openEnvMcp, { port: 0 })
      const c = yield* raw(wsUrl(mcp))
      yield* c.send({ type: "reset", data: {} })
      assert.strictEqual(yield* c.nextText, `{"type":"observation","data":{"observation":{},"reward":0,"done":false}}`)
      yield* c.sendText(
        `{"type":"step","data":{"type":"call_tool","tool_name":"echo_message","arguments":{"message":"Hi"}}}`
      )
      const step = yield* c.next
      assert.strictEqual(step.type, "observation")
      const o = step.data.observation
      assert.strictEqual(o.tool_name, "echo_message")
      assert.deepStrictEqual(o.result.content.map((x: any) => [x.type, x.text]), [["text", "Hi"]])
      assert.deepStrictEqual(
        [o.result.structured_content, o.result.meta, o.result.data, o.result.is_error, o.error],
        [{ result: "Hi" }, null, "Hi", false, null]
      )
      assert.deepStrictEqual([step.data.reward, step.data.done], [null, false])
      yield* c.send({ type: "state" })
      assert.strictEqual((yield* c.next).data.step_count, 1)

      const legacy = yield* Server.serve(Echo.openEnv, { port: 0 })
      const l = yield* raw(wsUrl(legacy))
      yield* l.send({ type: "reset" })
      assert.deepStrictEqual((yield* l.next).data, {
        observation: { echoed_message: "Echo environment ready!", message_length: 0 },
        reward: 0,
        done: false
      })
      yield* l.send({ type: "step", data: { message: "hello" } })
      assert.deepStrictEqual((yield* l.next).data, {
        observation: { echoed_message: "hello", message_length: 5 },
        reward: 0.5,
        done: false
      })
      yield* l.send({ type: "step", data: { message: "" } })
      assert.strictEqual((yield* l.next).data.code, "VALIDATION_ERROR")
    }))
})
