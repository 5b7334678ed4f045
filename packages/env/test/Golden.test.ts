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
      const resetText = yield* c.nextText
      const ball = (JSON.parse(resetText).data.observation.info_state as Array<number>).indexOf(1)
      assert.isTrue(ball >= 0 && ball < 5)
      const obs = (phase: string, ones: ReadonlyArray<number>) =>
        `{"info_state":[${Array.from({ length: 50 }, (_, i) => ones.includes(i) ? "1.0" : "0.0").join(",")}],` +
        `"legal_actions":[0,1,2],"game_phase":"${phase}","current_player_id":0,"opponent_last_action":null}`
      assert.strictEqual(
        resetText,
        `{"type":"observation","data":{"observation":${obs("initial", [ball, 47])},"reward":null,"done":false}}`
      )

      yield* c.sendText(`{"type":"step","data":{"action_id":2,"game_name":"catch","game_params":{}}}`)
      assert.strictEqual(
        yield* c.nextText,
        `{"type":"observation","data":{"observation":${obs("playing", [5 + ball, 48])},"reward":0.0,"done":false}}`
      )

      yield* c.sendText(`{"type":"state"}`)
      const stateText = yield* c.nextText
      const episodeId = JSON.parse(stateText).data.episode_id
      assert.isString(episodeId)
      assert.strictEqual(
        stateText,
        `{"type":"state","data":{"episode_id":"${episodeId}","step_count":1,"game_name":"catch","agent_player":0,` +
          `"opponent_policy":"random","game_params":{},"num_players":1}}`
      )
      yield* c.sendText(`{"type":"close"}`)
      assert.strictEqual(yield* c.closed, 1000)
    }))

  it.scopedLive("Wordle (textarena_env), secret 'jewel'", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(Wordle.openEnv, { port: 0 })
      const c = yield* raw(wsUrl(s))
      yield* c.send({ type: "reset", data: { secret: "jewel" } })
      const prompt =
        "You are Playing Wordle.\nA secret 5-letter word has been chosen. You have 6 attempts to guess it.\n" +
        "For each guess, wrap your word in square brackets (e.g., '[apple]').\n" +
        "Feedback for each letter will be given as follows:\n" +
        "  - G (green): correct letter in the correct position\n" +
        "  - Y (yellow): letter exists in the word but in the wrong position\n" +
        "  - X (wrong): letter is not in the word\nEnter your guess to begin.\n"
      const frame = (first: string, content: string, info: string, reward: string, done: boolean) =>
        `{"type":"observation","data":{"observation":{"prompt":${JSON.stringify(first)},` +
        `"messages":[{"sender_id":-1,"content":${JSON.stringify(content)},"category":"MESSAGE"}],` +
        `"current_player_id":0,"legal_players":[0],"info":${info}},"reward":${reward},"done":${done}}}`
      const signals = (correct: string) =>
        `{"reward_signals":{"wordle.greens":0.0,"wordle.yellows":0.2,"wordle.repetitions":1.0,"wordle.correct":${correct}}}`
      const start = "\n[GAME] " + prompt
      assert.strictEqual(yield* c.nextText, frame(start.trim(), start, "{}", "0.0", false))

      yield* c.send({ type: "step", data: { message: "crane" } })
      const afterCrane = start +
        "\n[GAME] [crane]\n[GAME] You submitted [crane].\nFeedback:\nC R A N E\nX X X X Y\nYou have 5 guesses left."
      assert.strictEqual(yield* c.nextText, frame("Wordle-v0", afterCrane, signals("0.0"), "0.0", false))

      yield* c.send({ type: "step", data: { message: "[xyzzy]" } })
      const afterXyzzy = afterCrane +
        "\n[GAME] [xyzzy]\n[GAME] You attempted an invalid move. Reason: 'xyzzy' is not an English word. Please resubmit a valid move and remember to follow the game rules to avoid penalties."
      assert.strictEqual(yield* c.nextText, frame("Wordle-v0", afterXyzzy, signals("0.0"), "0.0", false))

      // The second consecutive invalid move ends the game with the last valid guess's score, 0.5/5 (only the action
      // line is logged, no reason text).
      yield* c.send({ type: "step", data: { message: "hello there" } })
      assert.strictEqual(
        yield* c.nextText,
        frame("Wordle-v0", afterXyzzy + "\n[GAME] [hello there]", signals("0.1"), "0.1", true)
      )
    }))

  it.scopedLive("Echo: MCP call_tool step and the legacy echo", () =>
    Effect.gen(function*() {
      const mcp = yield* Server.serve(Echo.openEnvMcp, { port: 0 })
      const c = yield* raw(wsUrl(mcp))
      yield* c.send({ type: "reset", data: {} })
      assert.strictEqual(
        yield* c.nextText,
        `{"type":"observation","data":{"observation":{},"reward":0.0,"done":false}}`
      )
      yield* c.sendText(
        `{"type":"step","data":{"type":"call_tool","tool_name":"echo_message","arguments":{"message":"Hi"}}}`
      )
      // The reference elides the rest of the content item (`"text":"Hi",…`); everything else is compared byte for byte.
      const stepText = yield* c.nextText
      assert.isTrue(stepText.startsWith(
        `{"type":"observation","data":{"observation":{"tool_name":"echo_message","result":` +
          `{"content":[{"type":"text","text":"Hi"`
      ))
      assert.isTrue(stepText.endsWith(
        `}],"structured_content":{"result":"Hi"},"meta":{"fastmcp":{"wrap_result":true}},"data":"Hi","is_error":false},` +
          `"error":null},` +
          `"reward":null,"done":false}}`
      ))
      assert.deepStrictEqual(JSON.parse(stepText).data.observation.result.content.length, 1)
      yield* c.send({ type: "state" })
      const stateText = yield* c.nextText
      assert.strictEqual(
        stateText,
        `{"type":"state","data":{"episode_id":${JSON.stringify(JSON.parse(stateText).data.episode_id)},"step_count":1}}`
      )

      const legacy = yield* Server.serve(Echo.openEnv, { port: 0 })
      const l = yield* raw(wsUrl(legacy))
      const echo = (message: string, length: number, reward: string) =>
        `{"type":"observation","data":{"observation":{"echoed_message":${JSON.stringify(message)},` +
        `"message_length":${length}},"reward":${reward},"done":false}}`
      yield* l.send({ type: "reset" })
      assert.strictEqual(yield* l.nextText, echo("Echo environment ready!", 0, "0.0"))
      yield* l.send({ type: "step", data: { message: "hello" } })
      assert.strictEqual(yield* l.nextText, echo("hello", 5, "0.5"))
      // Python: len("hey") * 0.1 == 0.30000000000000004; len("helloworld") * 0.1 == 1.0.
      yield* l.send({ type: "step", data: { message: "hey" } })
      assert.strictEqual(yield* l.nextText, echo("hey", 3, "0.30000000000000004"))
      yield* l.send({ type: "step", data: { message: "helloworld" } })
      assert.strictEqual(yield* l.nextText, echo("helloworld", 10, "1.0"))
      yield* l.send({ type: "step", data: { message: "" } })
      assert.strictEqual((yield* l.next).data.code, "VALIDATION_ERROR")
    }))
})
