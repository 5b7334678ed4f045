/**
 * Turning one generation batch of episodes into training micro-batches (TRL reference §4.3 steps 2–5): rewards,
 * advantages, loss masks, old / reference logprobs, the sampler correction, the row shuffle and the split into
 * `stepsPerGeneration` chunks, repeated `numIterations` times. Micro-batches are plain JSON so a checkpoint can
 * hold the ones not yet consumed.
 */
import { type EpisodeRecord, segmentsOf } from "@envtrain/rollout/Episode"
import { Effect } from "effect"
import * as Advantage from "../Advantage.js"
import * as CompletionMetrics from "../CompletionMetrics.js"
import type { ResolvedGRPOConfig } from "../Config.js"
import { epochOrder, mixSeed } from "../Dataset.js"
import * as Loss from "../Loss.js"
import type { CompletionSample } from "../Metrics.js"
import * as Reward from "../Reward.js"
import { batchOf, type LossInputs, type TrainableModel } from "./model.js"
import { environmentOf, modelTokens, rewardEpisode } from "./rollouts.js"
import { nanmean } from "./stats.js"

export interface TrainRow {
  readonly prompt: ReadonlyArray<number>
  readonly completion: ReadonlyArray<number>
  /** Loss mask per completion token (tool tokens, truncated or unscoreable rows already 0). */
  readonly mask: ReadonlyArray<number>
  readonly advantage: number
  readonly sampler: ReadonlyArray<number>
  readonly old?: ReadonlyArray<number>
  readonly ref?: ReadonlyArray<number>
  /** Sampler-correction ratio per completion token. */
  readonly ratio?: ReadonlyArray<number>
}

export interface MicroBatch {
  readonly rows: ReadonlyArray<TrainRow>
  /** Loss tokens of the whole generation batch (dapo / cispo / vespo normaliser). */
  readonly numItemsInBatch: number
  readonly ratioLevel?: "token" | "sequence"
}

export interface GenerationResult {
  readonly microBatches: ReadonlyArray<MicroBatch>
  readonly metrics: Record<string, number>
  readonly tokens: number
  readonly samples: ReadonlyArray<CompletionSample>
}

/** Whether TRL computes l^old after generation (§3.2): the ratio is not trivially 1, or the sampler is corrected. */
export const needsOldLogprobs = (config: ResolvedGRPOConfig): boolean =>
  config.gradientAccumulationSteps % (config.stepsPerGeneration * config.numIterations) !== 0 ||
  config.numIterations > 1 || config.importanceSamplingCorrection

const scoreRows = (
  model: TrainableModel,
  rows: ReadonlyArray<{ readonly prompt: ReadonlyArray<number>; readonly completion: ReadonlyArray<number> }>,
  temperature: number,
  chunk: number
) =>
  Effect.gen(function*() {
    const out: Array<Array<number>> = []
    for (let s = 0; s < rows.length; s += chunk) {
      const part = rows.slice(s, s + chunk)
      const batch = batchOf(part.map((r) => r.prompt), part.map((r) => r.completion))
      const scores = yield* model.score(batch, temperature)
      part.forEach((r, i) =>
        out.push(Array.from(scores.logprobs.subarray(i * batch.length, i * batch.length + r.completion.length)))
      )
    }
    return out
  })

/** Runs the reward functions on a batch's records (TRL's `_calculate_rewards`). */
export const scoreRecords = <State, RE = never, RR = never>(options: {
  readonly config: ResolvedGRPOConfig
  readonly records: ReadonlyArray<EpisodeRecord<State>>
  readonly rewardFunctions: ReadonlyArray<Reward.RewardFunction<State, any, any, RE, RR>>
  readonly trainerState: Reward.TrainerState
}) =>
  Reward.score(options.rewardFunctions, options.records.map(rewardEpisode), {
    weights: options.config.rewardWeights,
    trainerState: options.trainerState
  })

/**
 * A scored generation batch made ready to train: advantages, loss masks, old / reference logprobs, the sampler
 * correction, shuffled micro-batches, and the batch's metrics and sample completions.
 */
export const prepare = <State, RE = never, RR = never>(options: {
  readonly config: ResolvedGRPOConfig
  readonly records: ReadonlyArray<EpisodeRecord<State>>
  readonly rewardFunctions: ReadonlyArray<Reward.RewardFunction<State, any, any, RE, RR>>
  readonly trainerState: Reward.TrainerState
  readonly model: TrainableModel
  readonly reference: TrainableModel | undefined
  readonly step: number
  readonly decode: (ids: ReadonlyArray<number>) => string
  /** The records' rewards when already scored (dynamic sampling scores before it re-rolls). */
  readonly table?: Reward.RewardTable
}) =>
  Effect.gen(function*() {
    const { config, records } = options
    const G = config.numGenerations
    const table = options.table ?? (yield* scoreRecords(options))
    const adv = Advantage.compute(table, {
      numGenerations: G,
      scaleRewards: config.scaleRewards,
      multiObjectiveAggregation: config.multiObjectiveAggregation
    })
    // One row per segment (an episode is one segment unless it says otherwise); a segment shares its episode's
    // advantage and row mask.
    const segments = records.flatMap((r, i) => segmentsOf(r).map((segment) => ({ segment, episode: i })))
    const masks = segments.map(({ episode, segment }) => {
      const m = Loss.lossMask({
        rows: 1,
        length: segment.completionIds.length,
        completionMask: segment.completionIds.map(() => 1),
        toolMask: segment.mask,
        truncated: [segment.truncated],
        maskTruncatedCompletions: config.maskTruncatedCompletions,
        rowMask: [adv.rowMask[episode]]
      })
      return Array.from(m)
    })
    const numItemsInBatch = masks.reduce((s, m) => s + Loss.countTokens(m), 0)
    const base = segments.map(({ segment }) => ({ prompt: segment.promptIds, completion: segment.completionIds }))
    const chunk = config.perDeviceTrainBatchSize
    const old = needsOldLogprobs(config) ? yield* scoreRows(options.model, base, config.temperature, chunk) : undefined
    const ref = options.reference !== undefined && config.beta !== 0
      ? yield* scoreRows(options.reference, base, config.temperature, chunk)
      : undefined

    let ratioLevel: "token" | "sequence" | undefined
    const samplingMetrics: Array<Record<string, number>> = []
    const ratios = segments.map(({ segment }, i) => {
      if (!config.importanceSamplingCorrection || old === undefined) return undefined
      const correction = Loss.samplerCorrection({
        rows: 1,
        length: segment.completionIds.length,
        oldLogprobs: old[i],
        samplerLogprobs: segment.logprobs,
        mask: masks[i],
        mode: config.importanceSamplingMode,
        clipMin: config.importanceSamplingClipMin,
        clipMax: config.importanceSamplingClipMax
      })
      ratioLevel = correction.level
      if (Loss.countTokens(masks[i]) > 0) samplingMetrics.push(correction.metrics)
      return Array.from(correction.ratio)
    })

    const rows: Array<TrainRow> = segments.map(({ episode, segment }, i) => ({
      prompt: segment.promptIds,
      completion: segment.completionIds,
      mask: masks[i],
      advantage: adv.advantages[episode],
      sampler: segment.logprobs,
      ...(old === undefined ? {} : { old: old[i] }),
      ...(ref === undefined ? {} : { ref: ref[i] }),
      ...(ratios[i] === undefined ? {} : { ratio: ratios[i] })
    }))
    // TRL shuffles the generation batch's rows before splitting it into micro-batches.
    const order = epochOrder(rows.length, 0, mixSeed(config.seed, options.step, 7), true)
    const shuffled = order.map((j) => rows[j])
    const chunks: Array<MicroBatch> = []
    for (let s = 0; s < shuffled.length; s += chunk) {
      chunks.push({
        rows: shuffled.slice(s, s + chunk),
        numItemsInBatch,
        ...(ratioLevel === undefined ? {} : { ratioLevel })
      })
    }
    const microBatches: Array<MicroBatch> = []
    for (let k = 0; k < config.numIterations; k++) microBatches.push(...chunks)

    // Metrics of the generation batch.
    const metrics: Record<string, number> = { ...Reward.metrics(table), ...adv.metrics }
    const completion = CompletionMetrics.compute({
      modelTokens: records.map(modelTokens),
      truncated: records.map((r) => r.truncated),
      promptTokens: records.map((r) => r.promptIds.length),
      toolCalls: records.map((r) => r.toolCallCount),
      toolFailures: records.map((r) => r.toolFailureCount)
    })
    const tokens = completion["tokens"]
    delete completion["tokens"]
    Object.assign(metrics, completion)
    for (const key of Object.keys(samplingMetrics[0] ?? {})) {
      const values = samplingMetrics.map((m) => m[key])
      metrics[key] = key.endsWith("/max")
        ? Math.max(...values)
        : key.endsWith("/min")
        ? Math.min(...values)
        : nanmean(values)
    }
    metrics["unscoreable_frac"] = adv.unscoreable.filter((u) => u).length / Math.max(1, records.length)
    const envs = [...new Set(records.map(environmentOf))]
    if (envs.length > 1) {
      for (const env of envs) {
        const idx = records.flatMap((r, i) => (environmentOf(r) === env ? [i] : []))
        metrics[`env/${env}/reward`] = nanmean(idx.map((i) => table.rewards[i]))
        const calls = idx.reduce((s, i) => s + records[i].toolCallCount, 0)
        const failures = idx.reduce((s, i) => s + records[i].toolFailureCount, 0)
        metrics[`env/${env}/tools/failure_frequency`] = calls === 0 ? 0 : failures / calls
        metrics[`env/${env}/completions/mean_length`] = nanmean(idx.map((i) => modelTokens(records[i])))
      }
    }

    const k = table.names.length
    const samples: Array<CompletionSample> = records.map((r, i) => {
      const rewards: Record<string, number | null> = {}
      table.names.forEach((name, j) => {
        const v = table.values[i * k + j]
        rewards[name] = Number.isNaN(v) ? null : v
      })
      return {
        step: options.step,
        prompt: options.decode(r.promptIds),
        completion: options.decode(r.completionIds),
        rewards,
        advantage: adv.advantages[i],
        environment: environmentOf(r),
        extra: {
          tool_calls: r.toolCallCount,
          tool_failures: r.toolFailureCount,
          stop: r.stopReason,
          unscoreable: r.unscoreable?.reason ?? null
        }
      }
    })
    return { microBatches, metrics, tokens, samples } satisfies GenerationResult
  })

/**
 * The loss of one micro-batch through the model: returns the loss value and the loss-side metrics, or `deferred`
 * when the model computes them in its step (then they come with `model.step`). `samplerCorrection` is the run's
 * correction settings (when on), for a model that computes the correction itself.
 */
export const trainMicroBatch = (
  model: TrainableModel,
  micro: MicroBatch,
  options: Loss.LossOptions,
  temperature: number,
  samplerCorrection?: LossInputs["samplerCorrection"]
) =>
  Effect.gen(function*() {
    const batch = batchOf(micro.rows.map((r) => r.prompt), micro.rows.map((r) => r.completion))
    const T = batch.length
    const B = micro.rows.length
    const padded = (pick: (r: TrainRow) => ReadonlyArray<number> | undefined) => {
      if (micro.rows.some((r) => pick(r) === undefined)) return undefined
      const out = new Float64Array(B * T)
      micro.rows.forEach((r, i) => out.set(pick(r)!, i * T))
      return out
    }
    const mask = padded((r) => r.mask)!
    const old = padded((r) => r.old)
    const ref = padded((r) => r.ref)
    const sampler = padded((r) => r.sampler)
    const ratio = padded((r) => r.ratio)
    if (ratio !== undefined) {
      // Padding positions are outside the mask; keep their ratio neutral.
      micro.rows.forEach((r, i) => ratio.fill(1, i * T + r.completion.length, (i + 1) * T))
    }
    const advantages = Float64Array.from(micro.rows.map((r) => r.advantage))
    let result: Loss.LossResult | undefined
    const trained = batch.prompts.reduce((s, p, i) => s + p.length + batch.completions[i].length, 0)
    if (model.accumulateLoss !== undefined) {
      const now = yield* model.accumulateLoss(batch, temperature, {
        mask,
        advantages,
        oldLogprobs: old,
        refLogprobs: ref,
        samplerLogprobs: sampler,
        importanceSampling: ratio === undefined
          ? undefined
          : { ratio, level: micro.ratioLevel ?? "token", metrics: {} },
        samplerCorrection: ratio === undefined ? undefined : samplerCorrection,
        numItemsInBatch: micro.numItemsInBatch
      }, options)
      return { loss: now?.loss ?? 0, metrics: now?.metrics ?? {}, tokens: trained, deferred: now === undefined }
    }
    yield* model.accumulate(batch, temperature, (scores) => {
      result = Loss.compute({
        rows: B,
        length: T,
        logprobs: scores.logprobs,
        mask,
        advantages,
        oldLogprobs: old,
        refLogprobs: ref,
        samplerLogprobs: sampler,
        importanceSampling: ratio === undefined
          ? undefined
          : { ratio, level: micro.ratioLevel ?? "token", metrics: {} },
        entropies: scores.entropies,
        numItemsInBatch: micro.numItemsInBatch
      }, options)
      return result.gradient
    })
    return { loss: result!.loss, metrics: result!.metrics, tokens: trained, deferred: false }
  })
