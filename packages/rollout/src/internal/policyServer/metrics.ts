// The policy server's counters and their Prometheus text exposition (format 0.0.4). Names follow vLLM's
// (`num_requests_running`, `num_requests_waiting`, `prompt_tokens_total`, `generation_tokens_total`) under the
// `envtrain:` prefix, so dashboards built for vLLM need only the prefix changed; `process_cpu_seconds_total` keeps
// its standard unprefixed name.

const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256]

export interface Metrics {
  readonly request: (endpoint: string, status: number) => void
  readonly tokens: (prompt: number, completion: number) => void
  readonly batch: (size: number) => void
  /** One decode step of the continuous batch, with this many sequences. */
  readonly step: (occupancy: number) => void
  readonly running: (n: number) => void
  readonly waiting: (n: number) => void
  readonly version: (v: number) => void
  readonly weightUpdate: (ok: boolean) => void
  /** Sequences whose leaving the batch failed in the decoder's `end` (what it held may not be freed). */
  readonly endFailures: (n: number) => void
  readonly render: () => string
}

export const make = (model: string): Metrics => {
  const requests = new Map<string, number>()
  let promptTokens = 0
  let completionTokens = 0
  const buckets = BATCH_BUCKETS.map(() => 0)
  let batches = 0
  const stepBuckets = BATCH_BUCKETS.map(() => 0)
  let steps = 0
  let stepSequences = 0
  let busiest = 0
  let batchedRequests = 0
  let largest = 0
  let last = 0
  let running = 0
  let waiting = 0
  let version = 0
  let updates = 0
  let failedUpdates = 0
  let endFailures = 0
  const label = `model_name="${model.replace(/["\\\n]/g, "_")}"`
  return {
    request: (endpoint, status) => {
      const key = `endpoint="${endpoint}",status="${status}"`
      requests.set(key, (requests.get(key) ?? 0) + 1)
    },
    tokens: (prompt, completion) => {
      promptTokens += prompt
      completionTokens += completion
    },
    batch: (size) => {
      batches++
      batchedRequests += size
      largest = Math.max(largest, size)
      last = size
      BATCH_BUCKETS.forEach((b, i) => {
        if (size <= b) buckets[i]++
      })
    },
    step: (occupancy) => {
      steps++
      stepSequences += occupancy
      busiest = Math.max(busiest, occupancy)
      BATCH_BUCKETS.forEach((b, i) => {
        if (occupancy <= b) stepBuckets[i]++
      })
    },
    running: (n) => running = n,
    waiting: (n) => waiting = n,
    version: (v) => version = v,
    weightUpdate: (ok) => ok ? updates++ : failedUpdates++,
    endFailures: (n) => endFailures += n,
    render: () => {
      const lines: Array<string> = []
      const metric = (name: string, type: string, help: string, samples: ReadonlyArray<[string, number]>) => {
        lines.push(`# HELP envtrain:${name} ${help}`, `# TYPE envtrain:${name} ${type}`)
        for (const [suffix, value] of samples) lines.push(`envtrain:${name}${suffix} ${value}`)
      }
      metric(
        "requests_total",
        "counter",
        "HTTP requests answered, by endpoint and status.",
        [...requests].map(([k, v]) => [`{${label},${k}}`, v])
      )
      metric("prompt_tokens_total", "counter", "Prompt tokens of served completions.", [[`{${label}}`, promptTokens]])
      metric("generation_tokens_total", "counter", "Tokens generated.", [[`{${label}}`, completionTokens]])
      metric("num_requests_running", "gauge", "Sequences in the batch now decoding.", [[`{${label}}`, running]])
      metric("num_requests_waiting", "gauge", "Sequences queued, not yet decoding (queue depth).", [
        [`{${label}}`, waiting]
      ])
      const histogram = (name: string, help: string, counts: ReadonlyArray<number>, count: number, sum: number) =>
        metric(name, "histogram", help, [
          ...BATCH_BUCKETS.map((b, i): [string, number] => [`_bucket{${label},le="${b}"}`, counts[i]]),
          [`_bucket{${label},le="+Inf"}`, count],
          [`_sum{${label}}`, sum],
          [`_count{${label}}`, count]
        ])
      histogram(
        "batch_size",
        "Sequences per batch handed to the backend (continuous batching: per group admitted into the running batch).",
        buckets,
        batches,
        batchedRequests
      )
      histogram(
        "decode_step_occupancy",
        "Sequences decoded together per decode step (continuous batching only; the batch occupancy).",
        stepBuckets,
        steps,
        stepSequences
      )
      metric("decode_step_occupancy_max", "gauge", "Most sequences in one decode step so far (continuous batching).", [
        [`{${label}}`, busiest]
      ])
      metric("batch_size_last", "gauge", "Sequences in the last batch.", [[`{${label}}`, last]])
      metric("batch_size_max", "gauge", "Most sequences in one batch so far.", [[`{${label}}`, largest]])
      metric("policy_version", "gauge", "Version of the loaded weights (0 at start, +1 per update).", [
        [`{${label}}`, version]
      ])
      metric("weight_updates_total", "counter", "Weight updates, by outcome.", [
        [`{${label},outcome="ok"}`, updates],
        [`{${label},outcome="failed"}`, failedUpdates]
      ])
      metric(
        "decoder_end_failures_total",
        "counter",
        "Sequences that left the batch unfinished and whose release in the backend failed (logged as warnings).",
        [[`{${label}}`, endFailures]]
      )
      // The process's CPU time under its standard name (Prometheus clients export it; vLLM's /metrics has it): what
      // serving costs, whatever else shares the machine.
      const cpu = process.cpuUsage()
      lines.push(
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.",
        "# TYPE process_cpu_seconds_total counter",
        `process_cpu_seconds_total ${(cpu.user + cpu.system) / 1e6}`
      )
      return lines.join("\n") + "\n"
    }
  }
}
