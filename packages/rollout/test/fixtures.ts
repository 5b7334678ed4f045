// Shared test fixtures: a tiny Qwen3-style tokenizer trained by @envtrain/text and its chat template.
import * as ChatTemplate from "@envtrain/text/ChatTemplate"
import * as Tokenizer from "@envtrain/text/Tokenizer"
import { Effect, Layer } from "effect"
import { ChatRenderer } from "../src/index.js"

const trained = Tokenizer.train({ vocabSize: 1024 })

/** The tokenizer and template the tiny preset ships with. */
export const tinyModel = Effect.gen(function*() {
  const tokenizer = yield* Tokenizer.Tokenizer.fromJson(
    trained,
    Tokenizer.qwen3TokenizerConfig(trained, ChatTemplate.QWEN3_STYLE_TEMPLATE)
  )
  const template = yield* ChatTemplate.ChatTemplate.fromString(ChatTemplate.QWEN3_STYLE_TEMPLATE)
  return { tokenizer, template }
}).pipe(Effect.orDie)

/** A renderer over the tiny model. */
export const renderer = (enableThinking = false) =>
  Layer.effect(
    ChatRenderer.ChatRenderer,
    Effect.map(tinyModel, ({ template, tokenizer }) => ChatRenderer.make({ tokenizer, template, enableThinking }))
  )

/** The last tool response in a decoded conversation (or the last user message when there is none). */
export const lastObservation = (text: string): string => {
  const responses = text.split("<tool_response>\n")
  if (responses.length > 1) return responses[responses.length - 1].split("\n</tool_response>")[0]
  const users = text.split("<|im_start|>user\n")
  return users[users.length - 1].split("<|im_end|>")[0]
}

/** Number of tool-response blocks in a decoded conversation. */
export const toolResponses = (text: string): number => text.split("<tool_response>").length - 1

/** A Catch player as a scripted policy: moves the paddle under the ball, then stops calling tools. */
export const catchScript = ({ text }: { readonly text: string }): string => {
  const obs = lastObservation(text)
  const ball = /Ball: row (\d+)\/10, column (\d+)\/5/.exec(obs)
  const paddle = /Paddle: column (\d+)\/5/.exec(obs)
  if (ball === null || paddle === null) return "The ball is caught."
  const b = Number(ball[2])
  const p = Number(paddle[1])
  const call = b === p
    ? "{\"name\": \"stay\", \"arguments\": {}}"
    : `{"name": "move", "arguments": {"direction": "${b < p ? "left" : "right"}"}}`
  return `<tool_call>\n${call}\n</tool_call>`
}
