/**
 * The model commands of the `envtrain` binary, each the wiring of `@envtrain/gpu`'s checkpoint, model and generation:
 * - `init-model --preset tiny|small --out DIR [--seed N]`: a new random Qwen3-architecture model directory;
 * - `generate --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p M]
 *   [--repetition-penalty R] [--seed S] [--chat] [--json]`: generates on the GPU (`--chat` wraps the prompt as a
 *   user message with the model's chat template; stops at the tokenizer's EOS tokens);
 * - `score --model DIR --tokens FILE.json`: per-token logprobs of a token sequence (a JSON array of ids, or
 *   `{ "tokens": [...] }`) as JSON: `logprobs[i]` is log p(tokens[i+1] | tokens[..i]);
 * - `merge --base DIR --adapter DIR --out DIR`: fold a PEFT LoRA adapter into its base model and write a full
 *   Hugging Face checkpoint in the base's dtype (as PEFT's `merge_and_unload` + `save_pretrained`).
 *
 * @example
 * ```ts
 * import { Command } from "@effect/cli"
 * import * as Model from "@envtrain/harness/commands/Model"
 *
 * const cli = Command.make("envtrain").pipe(Command.withSubcommands(Model.commands))
 * // envtrain generate --model models/tiny --prompt "Hello" --max-tokens 32 --json
 * ```
 *
 * @since 0.0.0
 */
import { Command, Options } from "@effect/cli"
import { FileSystem } from "@effect/platform"
import { Checkpoint, Generation, Gpu, LoraAdapter, Preset, Qwen3 } from "@envtrain/gpu"
import { Console, Data, Effect } from "effect"

/** A command's input is unusable (a file that is not a token list, ...). */
export class ModelCommandError extends Data.TaggedError("ModelCommandError")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

const modelDir = Options.directory("model").pipe(Options.withDescription("a Hugging Face model directory"))
const json = Options.boolean("json").pipe(Options.withDescription("print JSON"))

/** `init-model`. */
export const initModel = Command.make(
  "init-model",
  {
    preset: Options.choice("preset", Preset.PRESET_NAMES).pipe(Options.withDescription("model size")),
    out: Options.text("out").pipe(Options.withDescription("directory to write")),
    seed: Options.integer("seed").pipe(Options.withDefault(0), Options.withDescription("weight seed"))
  },
  ({ out, preset, seed }) =>
    Effect.gen(function*() {
      const r = yield* Checkpoint.initModel({ preset, out, seed })
      yield* Console.log(
        `Wrote ${r.dir}: Qwen3 ${preset}, ${r.parameters.toLocaleString("en-US")} parameters, ` +
          `${r.config.num_hidden_layers} layers, hidden ${r.config.hidden_size}, vocab ${r.config.vocab_size} ` +
          `(${r.tokenizerVocabSize} tokenizer tokens)`
      )
    })
).pipe(Command.withDescription("Write a new random-initialised Qwen3-architecture model with its own BPE tokenizer."))

/** `generate`. */
export const generate = Command.make(
  "generate",
  {
    model: modelDir,
    prompt: Options.text("prompt").pipe(Options.withDescription("the prompt text")),
    maxTokens: Options.integer("max-tokens").pipe(Options.withDefault(64)),
    temperature: Options.float("temperature").pipe(Options.withDefault(1), Options.withDescription("0 is greedy")),
    topK: Options.integer("top-k").pipe(Options.withDefault(0)),
    topP: Options.float("top-p").pipe(Options.withDefault(1)),
    minP: Options.float("min-p").pipe(Options.withDefault(0)),
    repetitionPenalty: Options.float("repetition-penalty").pipe(Options.withDefault(1)),
    seed: Options.integer("seed").pipe(Options.withDefault(0)),
    chat: Options.boolean("chat").pipe(Options.withDescription("render the prompt as a user turn (chat template)")),
    json
  },
  (a) =>
    Effect.gen(function*() {
      const ckpt = yield* Checkpoint.load(a.model)
      const text = a.chat
        ? yield* ckpt.chatTemplate.render({
          messages: [{ role: "user", content: a.prompt }],
          addGenerationPrompt: true,
          enableThinking: false
        })
        : a.prompt
      const prompt = ckpt.tokenizer.encode(text)
      const model = yield* Qwen3.make(ckpt, {
        batch: 1,
        seq: 1,
        trainable: false,
        generation: { slots: 1, capacity: prompt.length + a.maxTokens, stepsPerSubmit: 8 }
      })
      const generator = yield* Generation.make(model)
      const t0 = performance.now()
      const out = yield* generator.generate({
        prompt,
        maxNewTokens: a.maxTokens,
        temperature: a.temperature,
        topK: a.topK,
        topP: a.topP,
        minP: a.minP,
        repetitionPenalty: a.repetitionPenalty,
        seed: a.seed,
        stopTokens: ckpt.tokenizer.eosTokenIds.slice(0, 8)
      })
      const seconds = (performance.now() - t0) / 1000
      const completion = ckpt.tokenizer.decode(out.tokens, { skipSpecialTokens: true })
      if (a.json) {
        yield* Console.log(JSON.stringify({
          prompt: text,
          promptTokens: prompt,
          completion,
          tokens: out.tokens,
          logprobs: out.logprobs,
          sampledLogprobs: out.sampledLogprobs,
          finishReason: out.finishReason,
          seconds
        }))
      } else yield* Console.log(completion)
    }).pipe(Effect.scoped, Effect.provide(Gpu.layer()))
).pipe(Command.withDescription("Generate a completion on the GPU (KV cache, GPU sampling)."))

const parseTokens = (text: string, file: string): Effect.Effect<Array<number>, ModelCommandError> =>
  Effect.try({
    try: () => {
      const v = JSON.parse(text) as unknown
      const list = Array.isArray(v) ? v : (v as { tokens?: unknown }).tokens
      if (!Array.isArray(list) || !list.every((t) => Number.isInteger(t) && t >= 0)) throw new Error("no token list")
      return list as Array<number>
    },
    catch: () =>
      new ModelCommandError({
        problem: `${file} is not a token list; write a JSON array of token ids or { "tokens": [ids...] }.`
      })
  })

/** `score`. */
export const score = Command.make(
  "score",
  {
    model: modelDir,
    tokens: Options.file("tokens").pipe(Options.withDescription("JSON: [ids...] or { \"tokens\": [ids...] }")),
    temperature: Options.float("temperature").pipe(Options.withDefault(1))
  },
  (a) =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const text = yield* fs.readFileString(a.tokens).pipe(
        Effect.mapError((e) => new ModelCommandError({ problem: `Cannot read ${a.tokens}: ${e.message}` }))
      )
      const tokens = yield* parseTokens(text, a.tokens)
      if (tokens.length < 2) {
        return yield* new ModelCommandError({ problem: "Scoring needs at least 2 tokens." })
      }
      const ckpt = yield* Checkpoint.load(a.model)
      const model = yield* Qwen3.make(ckpt, {
        batch: 1,
        seq: tokens.length,
        trainable: false,
        temperature: a.temperature
      })
      const r = yield* model.logprobs({ tokens })
      const logprobs = Array.from(r.logprobs.subarray(0, tokens.length - 1))
      yield* Console.log(JSON.stringify({
        tokens,
        logprobs,
        entropy: Array.from(r.entropy.subarray(0, tokens.length - 1)),
        total: logprobs.reduce((x, y) => x + y, 0)
      }))
    }).pipe(Effect.scoped, Effect.provide(Gpu.layer()))
).pipe(Command.withDescription("Per-token logprobs of a token sequence under a model, as JSON."))

/** `merge`. */
export const merge = Command.make(
  "merge",
  {
    base: Options.directory("base").pipe(Options.withDescription("the base model (a Hugging Face directory)")),
    adapter: Options.directory("adapter").pipe(Options.withDescription("a PEFT LoRA adapter made for that base")),
    out: Options.text("out").pipe(Options.withDescription("directory to write the merged model to"))
  },
  (a) =>
    Effect.gen(function*() {
      const r = yield* LoraAdapter.mergeDirectory(a)
      yield* Console.log(
        `Wrote ${r.out}: ${r.mergedTensors} projections merged, stored as ${r.dtype} (${r.files.join(", ")})`
      )
    })
).pipe(Command.withDescription("Fold a PEFT LoRA adapter into its base model (W + scaling·B·A, in the base's dtype)."))

/** All model commands, for `Command.withSubcommands`. */
export const commands = [initModel, generate, score, merge] as const
