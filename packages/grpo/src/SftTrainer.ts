/**
 * Supervised warm-up on chat / tool-calling transcripts (TRL's `SFTTrainer` with `assistant_only_loss`): each
 * transcript (a JSONL line `{"messages": [...], "tools": [...]}`) is rendered with the model's chat template and
 * trained with the next-token loss on the assistant turns only — their content, tool calls and end-of-turn token;
 * system, user and tool turns and the template's scaffolding are context. The mask comes from the template itself:
 * the text of assistant turn k is what rendering messages[0..k] adds to rendering messages[0..k) with the generation
 * prompt, cut after its end-of-turn token, so it is exactly the text the policy will later generate. Segments are
 * tokenised separately and concatenated, as the episode loop appends tokens.
 *
 * Same configuration file and checkpoint format as GRPO (learningRate, perDeviceTrainBatchSize,
 * gradientAccumulationSteps, maxSteps / numTrainEpochs, lrSchedulerType, warmup, AdamW, maxGradNorm, loggingSteps,
 * saveSteps, seed, outputDir) and the same run loop (resume, metrics.jsonl, the report, the checkpoint kept on
 * Ctrl-C); the loss is the mean negative log-likelihood over the assistant tokens of an optimizer step.
 *
 * @example
 * ```ts
 * import { SftTrainer } from "@envtrain/grpo"
 * const transcripts = yield* SftTrainer.fromJsonl("catch-solver.jsonl")
 * const result = yield* SftTrainer.train({ config, model, transcripts })
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem } from "@effect/platform"
import * as TrainingTemplate from "@envtrain/rollout/TrainingTemplate"
import type { ChatMessage, ToolDefinition } from "@envtrain/text/ChatTemplate"
import { Data, Effect } from "effect"
import * as Config from "./Config.js"
import { epochOrder } from "./Dataset.js"
import { batchOf, optimizerStep, type TrainableModel } from "./internal/model.js"
import * as RunLoop from "./internal/runLoop.js"
import * as LrSchedule from "./LrSchedule.js"
import * as Metrics from "./Metrics.js"
import type * as Progress from "./Progress.js"

/**
 * One training conversation.
 *
 * @since 0.0.0
 */
export interface Transcript {
  readonly messages: ReadonlyArray<ChatMessage>
  readonly tools?: ReadonlyArray<ToolDefinition>
}

/**
 * A transcript that cannot be used (bad JSON, no assistant turn, a template that renders turns differently
 * depending on what follows).
 *
 * @since 0.0.0
 */
export class TranscriptError extends Data.TaggedError("TranscriptError")<{
  readonly source: string
  readonly problem: string
}> {
  override get message() {
    return `SFT data ${this.source}: ${this.problem}`
  }
}

/**
 * Reads transcripts from JSONL: one `{"messages": [...], "tools"?: [...]}` per line.
 *
 * @since 0.0.0
 */
export const fromJsonl = Effect.fn("SftTrainer.fromJsonl")(function*(path: string) {
  const fs = yield* FileSystem.FileSystem
  const text = yield* fs.readFileString(path).pipe(
    Effect.mapError((e) => new TranscriptError({ source: path, problem: `cannot read (${e.message}); check the path` }))
  )
  const out: Array<Transcript> = []
  const lines = text.split("\n")
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].trim() === "") continue
    const value = yield* Effect.try({
      try: () => JSON.parse(lines[i]) as Record<string, unknown>,
      catch: (e) => new TranscriptError({ source: path, problem: `line ${i + 1} is not JSON (${String(e)})` })
    })
    if (!Array.isArray(value.messages)) {
      return yield* new TranscriptError({ source: path, problem: `line ${i + 1} has no "messages" list` })
    }
    out.push({
      messages: value.messages as ReadonlyArray<ChatMessage>,
      ...(Array.isArray(value.tools) ? { tools: value.tools as ReadonlyArray<ToolDefinition> } : {})
    })
  }
  return out
})

/**
 * A tokenised transcript: `ids` and a 0/1 `mask` (1 on assistant tokens).
 *
 * @since 0.0.0
 */
export interface Tokenized {
  readonly ids: ReadonlyArray<number>
  readonly mask: ReadonlyArray<0 | 1>
}

/**
 * Renders and tokenises a transcript with the assistant-only mask.
 *
 * @since 0.0.0
 */
export const tokenize = (
  model: Pick<TrainableModel, "tokenizer" | "chatTemplate">,
  transcript: Transcript,
  options: {
    readonly enableThinking?: boolean
    /** Other chat-template variables (`chat_template_kwargs`). */
    readonly extra?: Readonly<Record<string, unknown>>
    readonly source?: string
  } = {}
): Effect.Effect<Tokenized, TranscriptError> =>
  Effect.gen(function*() {
    const source = options.source ?? "transcript"
    const { chatTemplate: template, tokenizer } = model
    const tools = transcript.tools ?? []
    const render = (messages: ReadonlyArray<ChatMessage>, addGenerationPrompt: boolean) =>
      template.render({
        messages,
        tools,
        addGenerationPrompt,
        ...(options.enableThinking === undefined ? {} : { enableThinking: options.enableThinking }),
        ...(options.extra === undefined ? {} : { extra: options.extra })
      }).pipe(Effect.mapError((e) => new TranscriptError({ source, problem: e.message })))
    const stops = tokenizer.eosTokenIds.map((id) => tokenizer.idToToken(id)).filter((s): s is string => s !== undefined)
    const full = yield* render(transcript.messages, false)
    const ids: Array<number> = []
    const mask: Array<0 | 1> = []
    const push = (text: string, m: 0 | 1) => {
      if (text === "") return
      for (const id of tokenizer.encode(text)) {
        ids.push(id)
        mask.push(m)
      }
    }
    let consumed = 0
    const notStable = (k: number) =>
      new TranscriptError({
        source,
        problem: `rendering the conversation up to message ${k} is not a prefix of the whole conversation, so the ` +
          `assistant turns cannot be located; use a prefix-stable training template (envtrain's QWEN3_STYLE_TEMPLATE)`
      })
    for (let k = 0; k < transcript.messages.length; k++) {
      if (transcript.messages[k].role !== "assistant") continue
      const before = yield* render(transcript.messages.slice(0, k), true)
      const through = yield* render(transcript.messages.slice(0, k + 1), false)
      if (!full.startsWith(before) || !through.startsWith(before) || before.length < consumed) {
        return yield* notStable(k)
      }
      let turn = through.slice(before.length)
      let end = -1
      for (const s of stops) {
        const at = turn.lastIndexOf(s)
        if (at >= 0) end = Math.max(end, at + s.length)
      }
      if (end >= 0) turn = turn.slice(0, end)
      push(full.slice(consumed, before.length), 0)
      push(turn, 1)
      consumed = before.length + turn.length
    }
    // The template's text after the last assistant turn (its newline) is context, kept so the ids are the rendering.
    push(full.slice(consumed), 0)
    if (!mask.includes(1)) {
      return yield* new TranscriptError({ source, problem: "the conversation has no assistant turn to learn from" })
    }
    return { ids, mask }
  })

/**
 * Options of {@link train}.
 *
 * @since 0.0.0
 */
export interface SftOptions {
  readonly config: Config.GRPOConfig
  readonly model: TrainableModel
  readonly transcripts: ReadonlyArray<Transcript>
  readonly enableThinking?: boolean
  /** Longest sequence kept (tokens); longer transcripts are cut (their tail is not learnt). Default none. */
  readonly maxLength?: number
  /**
   * A transcript whose first assistant token lies past `maxLength` teaches nothing: by default SFT refuses to start
   * (naming how many and where their assistant turns begin); `true` drops them with a warning instead.
   */
  readonly dropUntrainable?: boolean
  readonly resume?: boolean | string
  readonly progress?: Progress.Progress | false
  readonly stopAfter?: number
  /** Render with the model's own chat template even when it is not prefix-preserving (then SFT refuses it); the
   * config's `keepModelTemplate` when not given. */
  readonly keepModelTemplate?: boolean
  readonly title?: string
  readonly onStep?: (step: { readonly step: number; readonly loss: number }) => Effect.Effect<void>
}

/** Says how many transcripts teach nothing, where their assistant turns begin, and the fixes. */
const untrainableProblem = (
  untrainable: ReadonlyArray<{ readonly index: number; readonly firstAssistant: number }>,
  total: number,
  maxLength: number | undefined
) => {
  const starts = untrainable.map((u) => u.firstAssistant).filter((p) => p >= 0).sort((a, b) => a - b)
  const noTurn = untrainable.length - starts.length
  const where = starts.length === 0
    ? ""
    : ` their first assistant token is at position ${starts[0]}` +
      (starts[starts.length - 1] > starts[0] ? `-${starts[starts.length - 1]}` : "") +
      ` of the rendered sequence, past maxLength ${maxLength ?? "(none)"}`
  return `${untrainable.length} of ${total} transcripts have no assistant token to train on:${where}${
    noTurn > 0 ? `${where === "" ? "" : ";"} ${noTurn} have no assistant turn at all` : ""
  } (e.g. transcript ${untrainable[0].index}). Raise maxLength above the prompt (the system prompt and the tool ` +
    `schemas rendered into it count), shorten the prompt, or drop these transcripts explicitly (dropUntrainable)`
}

/**
 * Runs SFT. Returns the per-step losses, the last checkpoint and the report path. A configuration whose `lora`
 * differs from the model's (`TrainableModel.lora`) is refused before anything runs ({@link Config.loraProblem}).
 *
 * @since 0.0.0
 */
export const train = (options: SftOptions) =>
  Effect.gen(function*() {
    const { config, model } = options
    // Before anything runs, as GRPO's Trainer.train does: a lora the model was not made with would be ignored.
    const lora = Config.loraProblem(config.lora, model.lora)
    if (lora !== undefined) return yield* new Config.GRPOConfigError({ source: "SFT", problems: [lora] })
    const data = yield* trainable(options)
    const B = config.perDeviceTrainBatchSize
    const GA = config.gradientAccumulationSteps
    const perEpoch = Math.floor(data.length / (B * GA))
    if (perEpoch === 0) {
      return yield* new TranscriptError({
        source: "transcripts",
        problem: `${data.length} transcripts cannot fill one optimizer step of perDeviceTrainBatchSize × ` +
          `gradientAccumulationSteps = ${B * GA}; add transcripts or lower the batch`
      })
    }
    const totalSteps = config.maxSteps > 0 ? config.maxSteps : Math.max(1, Math.ceil(config.numTrainEpochs * perEpoch))
    const lr = LrSchedule.fromConfig(config, totalSteps)
    const loop = yield* RunLoop.open(options, {
      kind: "sft",
      outputDir: config.outputDir,
      model,
      totalSteps,
      initial: {
        position: { epoch: 0, batch: 0 },
        seed: config.seed,
        numTokens: 0,
        config: config as unknown as Record<string, unknown>
      },
      logs: [Metrics.files.metrics],
      trackers: {
        reportTo: config.reportTo,
        runName: config.runName,
        project: config.project,
        config: config as unknown as Record<string, unknown>
      }
    })
    let { batch, epoch } = loop.state().position
    let numTokens = loop.state().numTokens

    // One optimizer step: GA micro-batches of B transcripts from this epoch's seeded order, the next-token loss on
    // their assistant tokens, the clipped AdamW update.
    const step = (step: number) =>
      Effect.gen(function*() {
        const started = Date.now()
        if (batch >= perEpoch) {
          epoch += 1
          batch = 0
        }
        const order = epochOrder(data.length, epoch, config.seed, config.shuffleDataset)
        const rows = order.slice(batch * B * GA, (batch + 1) * B * GA).map((i) => data[i])
        batch += 1
        const { loss, tokens } = yield* trainRows(model, rows, B, GA)
        const learningRate = lr(step)
        const globalStep = step + 1
        // The update and its commit as one against interruption (see Trainer.train).
        const { gradNorm } = yield* Effect.uninterruptible(Effect.tap(
          model.step(optimizerStep(config, learningRate)),
          () => {
            numTokens += tokens
            loop.commit({ globalStep, position: { epoch, batch }, numTokens })
          }
        ))
        const seconds = Math.max(1e-9, (Date.now() - started) / 1000)
        return {
          values: {
            loss,
            grad_norm: gradNorm,
            learning_rate: learningRate,
            num_tokens: numTokens,
            step_time: seconds,
            tokens_per_second: tokens / seconds
          },
          loss,
          epoch: epoch + batch / perEpoch,
          result: { step: globalStep, loss }
        }
      })

    const run = yield* RunLoop.run({
      loop,
      step,
      loggingSteps: config.loggingSteps,
      saveSteps: config.saveSteps,
      onStep: options.onStep
    })
    return {
      globalStep: run.globalStep,
      totalSteps,
      losses: run.results,
      checkpoint: run.checkpoint,
      report: run.report
    }
  }).pipe(Effect.withSpan("SftTrainer.train"))

/**
 * The transcripts tokenised with the template GRPO's rollouts render with (Qwen3's own is swapped for its training
 * template, as TRL does), so SFT teaches the very tokens the rollouts will produce; cut to maxLength. Transcripts
 * left with no assistant token to learn refuse the run, or are dropped with a warning (`dropUntrainable`).
 */
const trainable = (options: SftOptions) =>
  Effect.gen(function*() {
    const { config, model } = options
    const template = Config.templateOptions(config, options.enableThinking)
    const rendering = (options.keepModelTemplate ?? config.keepModelTemplate) ? model : {
      tokenizer: model.tokenizer,
      chatTemplate: yield* TrainingTemplate.resolve(model.chatTemplate, model.tokenizer).pipe(
        Effect.mapError((e) => new TranscriptError({ source: "the model's chat template", problem: e.message }))
      )
    }
    const data: Array<Tokenized> = []
    const untrainable: Array<{ readonly index: number; readonly firstAssistant: number }> = []
    for (let i = 0; i < options.transcripts.length; i++) {
      const t = yield* tokenize(rendering, options.transcripts[i], {
        ...template,
        source: `transcript ${i}`
      })
      const cut = options.maxLength ?? Infinity
      const kept = t.ids.length > cut ? { ids: t.ids.slice(0, cut), mask: t.mask.slice(0, cut) } : t
      // Position 0 has no prediction, so a trainable token is a 1 at position >= 1.
      if (kept.mask.indexOf(1, 1) === -1) untrainable.push({ index: i, firstAssistant: t.mask.indexOf(1, 1) })
      else data.push(kept)
    }
    if (untrainable.length > 0) {
      const problem = untrainableProblem(untrainable, options.transcripts.length, options.maxLength)
      if (options.dropUntrainable !== true) return yield* new TranscriptError({ source: "transcripts", problem })
      yield* Effect.logWarning(`SFT drops ${problem.split(":")[0]}`)
    }
    return data
  })

/**
 * Forward and backward of one step's rows in GA micro-batches of B: the mean negative log-likelihood over the
 * step's assistant tokens. Returns the loss and the tokens seen.
 */
const trainRows = (model: TrainableModel, rows: ReadonlyArray<Tokenized>, B: number, GA: number) =>
  Effect.gen(function*() {
    let targets = 0
    for (const r of rows) for (let t = 1; t < r.mask.length; t++) targets += r.mask[t]
    const N = Math.max(1, targets)
    let loss = 0
    let tokens = 0
    for (let m = 0; m < GA; m++) {
      const part = rows.slice(m * B, (m + 1) * B)
      // Prompt = the first token (it has no prediction); completion = the rest, weighted by its mask.
      const batchOfPart = batchOf(part.map((r) => r.ids.slice(0, 1)), part.map((r) => r.ids.slice(1)))
      const T = batchOfPart.length
      yield* model.accumulate(batchOfPart, 1, (scores) => {
        const w = new Float64Array(part.length * T)
        part.forEach((r, i) => {
          for (let t = 1; t < r.ids.length; t++) {
            if (r.mask[t] === 1) {
              w[i * T + t - 1] = -1 / N
              loss -= scores.logprobs[i * T + t - 1] / N
            }
          }
        })
        return w
      })
      tokens += part.reduce((s, r) => s + r.ids.length, 0)
    }
    return { loss, tokens }
  })
