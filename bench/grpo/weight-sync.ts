/**
 * Weight sync per update, push vs pull, for 1, 2 and 4 policy servers: the trainer's weights go to every server
 * after each optimizer step, either pushed (`POST /update_weights`: the f32 safetensors bytes to each server) or
 * published once to a weight store that the servers follow (`serve-policy --weights-from DIR`: each pulls, checks the
 * sha256 and loads; the trainer waits until each reports the version). What is timed is one update as the trainer
 * sees it (`importState` on the wrapped model: encode, send or publish, and the handshake with every server), minus
 * the bare model's `importState`; the servers are `envtrain serve-policy` children (fresh per mode and count; their
 * start is not timed) on this machine, so "pull" reads the store from the page cache and "push" crosses loopback.
 * Bytes: what leaves the trainer per update, and what the servers take in all together.
 *
 *   npx tsx bench/grpo/weight-sync.ts [--backend cpu|reference] [--shapes small,wide] [--updates N]
 *
 * Shapes: `small` is the small preset (≈ 3.7 M parameters, 15 MB f32); `wide` is the small preset's tokenizer with
 * hidden 512, 8 layers (≈ 25 M parameters, ≈ 100 MB f32), random weights. Saves bench/results/weight-sync.json and
 * bench/results/weight-sync.md with the load average.
 */
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { Checkpoint } from "@envtrain/gpu"
import * as Safetensors from "@envtrain/gpu/formats/Safetensors"
import { PolicyServerProcess } from "@envtrain/harness"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import * as PolicyServers from "../../packages/grpo/src/PolicyServers.js"
import * as Trainer from "../../packages/grpo/src/Trainer.js"

const argv = process.argv.slice(2)
const flag = (name: string, fallback: string) => {
  const at = argv.indexOf(`--${name}`)
  return at === -1 ? fallback : argv[at + 1]
}
const backend = flag("backend", "cpu")
if (backend !== "cpu" && backend !== "reference") throw new Error(`--backend takes cpu or reference, got ${backend}`)
const shapes = flag("shapes", "small").split(",")
for (const s of shapes) if (s !== "small" && s !== "wide") throw new Error(`--shapes takes small and/or wide, got ${s}`)
const updates = Number(flag("updates", "5"))
const counts = [1, 2, 4]
const modes = ["push", "pull"] as const

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length === 0 ? NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

const modelFor = (shape: string) =>
  Effect.gen(function*() {
    const small = yield* Checkpoint.makeModel("small", 1)
    if (shape === "small") return small
    const config = {
      ...small.config,
      hidden_size: 512,
      intermediate_size: 1536,
      num_hidden_layers: 8,
      num_attention_heads: 8,
      num_key_value_heads: 4,
      head_dim: 64
    }
    return { ...small, config, tensors: Checkpoint.randomInit(config, 1) }
  })

interface Row {
  readonly shape: string
  readonly mode: typeof modes[number]
  readonly servers: number
  readonly fileBytes: number
  readonly trainerBytesPerUpdate: number
  readonly serverBytesPerUpdate: number
  readonly medianSeconds: number
  readonly minSeconds: number
  readonly maxSeconds: number
  readonly bareSeconds: number
  readonly load: readonly [number, number]
}

const measure = (shape: string, checkpoint: Checkpoint.Model, dir: string, mode: typeof modes[number], n: number) =>
  Effect.scoped(Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const store = mode === "pull" ? yield* fs.makeTempDirectoryScoped() : undefined
    const servers = yield* Effect.forEach(
      Array.from({ length: n }, (_, i) => i),
      () =>
        PolicyServerProcess.launch({
          model: dir,
          backend,
          healthTimeout: "300 seconds",
          ...(store === undefined ? {} : { weightsFrom: store })
        }),
      { concurrency: 1 }
    )
    const local = Trainer.referenceModel(checkpoint)
    const state = yield* local.exportState
    const fileBytes = Safetensors.encode(state.weights).length
    const bare: Array<number> = []
    for (let i = 0; i < updates; i++) {
      const t = performance.now()
      yield* local.importState(state)
      bare.push((performance.now() - t) / 1000)
    }
    // The start (probe and first sync) is not timed.
    const model = yield* PolicyServers.withPolicyServers(local, {
      urls: servers.map((s) => s.url),
      ...(store === undefined ? {} : { weightStore: store })
    })
    const [load1, load5] = loadavg()
    const times: Array<number> = []
    for (let i = 0; i < updates; i++) {
      const t = performance.now()
      yield* model.importState(state)
      times.push((performance.now() - t) / 1000)
    }
    const bareSeconds = median(bare)
    const synced = times.map((t) => t - bareSeconds)
    const row: Row = {
      shape,
      mode,
      servers: n,
      fileBytes,
      trainerBytesPerUpdate: mode === "push" ? n * fileBytes : fileBytes,
      serverBytesPerUpdate: n * fileBytes,
      medianSeconds: median(synced),
      minSeconds: Math.min(...synced),
      maxSeconds: Math.max(...synced),
      bareSeconds,
      load: [load1, load5]
    }
    console.log(JSON.stringify(row))
    return row
  }))

const program = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const rows: Array<Row> = []
  const loadStart = loadavg()
  for (const shape of shapes) {
    const checkpoint = yield* modelFor(shape)
    const dir = path.join(yield* fs.makeTempDirectoryScoped(), "model")
    yield* Checkpoint.save(dir, checkpoint)
    for (const n of counts) {
      for (const mode of modes) rows.push(yield* measure(shape, checkpoint, dir, mode, n))
    }
  }
  const loadEnd = loadavg()
  const mb = (b: number) => (b / 1e6).toFixed(1)
  const f = (x: number) => x.toFixed(3)
  const date = new Date().toISOString().slice(0, 16).replace("T", " ")
  const md = [
    "# Weight sync per update: push vs pull (weight store)",
    "",
    `${date} UTC. ${updates} updates per row; seconds = one update as the trainer sees it (encode, then send to ` +
    "every server or publish once, then the policy_version handshake with every server) minus the bare model's " +
    `importState (median ${f(median(rows.map((r) => r.bareSeconds)))} s). Servers: \`envtrain serve-policy --backend ` +
    `${backend}\` children on this machine, fresh per row. "trainer sends" = bytes leaving the trainer per update; ` +
    "\"servers take\" = bytes all servers read or receive together. Pull reads the store from the local page cache: " +
    "on a network file system its reads cross the network too, but from the file server, not from the trainer.",
    "",
    "What each includes: push = encode once, then one HTTP body per server (the trainer writes N copies), each " +
    "server parses and loads; pull = encode, write and fsync once, then each server notices (inotify, else a 250 ms " +
    "poll), reads, checks the sha256 and loads, while the trainer asks each for its version every 20 ms. Here every " +
    "server shares the same 2 cores with the trainer, so N servers loading at once contend and the seconds grow with " +
    "N in both modes; across machines the servers load in parallel and what pull removes is the trainer sending N " +
    "copies (the \"trainer sends\" column), which loopback makes nearly free.",
    "",
    `Machine: ${cpus().length} CPU cores shared with other sessions' jobs: the numbers are noisy. ` +
    `Load average (1, 5 min): ${loadStart.slice(0, 2).map((x) => x.toFixed(2)).join(", ")} at the start, ` +
    `${loadEnd.slice(0, 2).map((x) => x.toFixed(2)).join(", ")} at the end.`,
    "",
    "| shape | file MB | servers | mode | trainer sends MB | servers take MB | s/update (median) | min–max | load 1m |",
    "| --- | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: |",
    ...rows.map((r) =>
      `| ${r.shape} | ${mb(r.fileBytes)} | ${r.servers} | ${r.mode} | ${mb(r.trainerBytesPerUpdate)} | ` +
      `${mb(r.serverBytesPerUpdate)} | ${f(r.medianSeconds)} | ${f(r.minSeconds)}–${f(r.maxSeconds)} | ` +
      `${r.load[0].toFixed(2)} |`
    ),
    "",
    `Reproduce: \`npx tsx bench/grpo/weight-sync.ts --backend ${backend} --shapes ${shapes.join(",")} ` +
    `--updates ${updates}\`.`
  ].join("\n")
  mkdirSync("bench/results", { recursive: true })
  writeFileSync(
    "bench/results/weight-sync.json",
    JSON.stringify({ date, backend, updates, cpus: cpus().length, loadStart, loadEnd, rows }, null, 2) + "\n"
  )
  writeFileSync("bench/results/weight-sync.md", md + "\n")
  console.log(md)
}).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

Effect.runPromise(program).catch((e) => {
  console.error(e)
  process.exit(1)
})
