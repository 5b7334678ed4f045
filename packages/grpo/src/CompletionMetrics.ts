/**
 * TRL's rollout-side metrics of a generation batch (`completions/*`, `tools/*`, `num_tokens`; TRL reference §2.3,
 * §1.12), computed from per-episode counts.
 *
 * @example
 * ```ts
 * const m = CompletionMetrics.compute({ modelTokens: [12, 40], truncated: [false, true], promptTokens: [30, 30],
 *   toolCalls: [1, 3], toolFailures: [0, 1] })
 * m["completions/clipped_ratio"] // 0.5
 * ```
 *
 * @since 0.0.0
 */

/**
 * Per-episode counts. `modelTokens` counts model-generated tokens only (tool-result tokens excluded); `truncated`
 * means the completion's last token is neither EOS nor PAD. Tool counts are given only when the run has tools.
 *
 * @since 0.0.0
 */
export interface CompletionCounts {
  readonly modelTokens: ReadonlyArray<number>
  readonly truncated: ReadonlyArray<boolean>
  readonly promptTokens?: ReadonlyArray<number>
  readonly toolCalls?: ReadonlyArray<number>
  readonly toolFailures?: ReadonlyArray<number>
}

const stats = (xs: ReadonlyArray<number>) => {
  // TRL substitutes a single 0 when no episode terminated.
  const values = xs.length === 0 ? [0] : xs
  let sum = 0
  for (const x of values) sum += x
  return { mean: sum / values.length, min: Math.min(...values), max: Math.max(...values) }
}

/**
 * `completions/{mean,min,max}_length`, `completions/{mean,min,max}_terminated_length` (0 when none terminated),
 * `completions/clipped_ratio`, and with tools `tools/call_frequency` (calls per episode) and
 * `tools/failure_frequency` (failures per call, 0 without calls). `tokens` is the batch's prompt + model tokens,
 * to be added to the cumulative `num_tokens`.
 *
 * @since 0.0.0
 */
export const compute = (counts: CompletionCounts): Record<string, number> => {
  const n = counts.modelTokens.length
  const all = stats(counts.modelTokens)
  const terminated = stats(counts.modelTokens.filter((_, i) => !counts.truncated[i]))
  let truncated = 0
  for (const t of counts.truncated) if (t) truncated++
  const out: Record<string, number> = {
    "completions/mean_length": all.mean,
    "completions/min_length": all.min,
    "completions/max_length": all.max,
    "completions/clipped_ratio": n === 0 ? 0 : truncated / n,
    "completions/mean_terminated_length": terminated.mean,
    "completions/min_terminated_length": terminated.min,
    "completions/max_terminated_length": terminated.max
  }
  let tokens = 0
  for (const x of counts.modelTokens) tokens += x
  for (const x of counts.promptTokens ?? []) tokens += x
  out["tokens"] = tokens
  if (counts.toolCalls !== undefined) {
    let calls = 0
    let failures = 0
    for (const c of counts.toolCalls) calls += c
    for (const f of counts.toolFailures ?? []) failures += f
    out["tools/call_frequency"] = n === 0 ? 0 : calls / n
    out["tools/failure_frequency"] = calls > 0 ? failures / calls : 0
  }
  return out
}
