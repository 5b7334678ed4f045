/**
 * Issue 17, check 3: transformers and envtrain read each other's model directories and compute the same thing.
 *
 * (a) Directories envtrain writes (`Checkpoint.initModel`, what `envtrain init-model --preset tiny` runs, in f32,
 * in bf16 and sharded with an index, and a trainer checkpoint after one AdamW step on the CPU backend, with its
 * optimizer.safetensors and trainer_state.json beside the weights) load with AutoModelForCausalLM and AutoTokenizer;
 * transformers' float32 logprobs equal envtrain's scoring (`Trainer.referenceModel`, the CPU backend) within 1e-4,
 * its greedy `generate` gives envtrain's greedy tokens, AutoTokenizer gives the ids of envtrain's trained BPE
 * tokenizer, and apply_chat_template renders envtrain's own template as envtrain does.
 *
 * (b) Small Qwen3 models made and saved by transformers itself (Qwen3Config, Qwen3ForCausalLM.save_pretrained,
 * with Qwen3's real tokenizer saved by AutoTokenizer next to them): f32 and bf16, tied and untied embeddings,
 * sharded with model.safetensors.index.json. Every weight is random (norm weights around 1, not 1). envtrain
 * loads each and scores within 1e-4 of transformers and generates the same greedy tokens. For bf16, transformers
 * computes in float32 from the same bf16 weights (loaded with dtype=float32, an exact upcast), which is what
 * envtrain does (it converts every stored dtype exactly to f32), so the same 1e-4 holds.
 *
 * The Python side is interop/python/hf_judge.py.
 */
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Checkpoint } from "@envtrain/gpu"
import * as Trainer from "@envtrain/grpo/Trainer"
import * as TrainerState from "@envtrain/grpo/TrainerState"
import * as ChatTemplate from "@envtrain/text/ChatTemplate"
import * as Tokenizer from "@envtrain/text/Tokenizer"
import { Duration, Effect } from "effect"
import * as Python from "../src/Python.js"
import { chatCases, QWEN3_DIR, texts } from "./qwen3Corpus.js"

/** f32 logprobs, transformers against envtrain. */
const TOLERANCE = 1e-4
const PROMPT_TOKENS = 24
const NEW_TOKENS = 12

const judge = <A>(commands: ReadonlyArray<string>, request: unknown) =>
  Python.run(["interop/python/hf_judge.py", ...commands], {
    stdin: JSON.stringify(request),
    timeout: Duration.minutes(5)
  }).pipe(Effect.map((out) => JSON.parse(out) as A))

interface Scored {
  readonly dir: string
  readonly logprobs: Array<Array<number>>
  readonly greedy: Array<Array<number>>
  readonly tied: boolean
  readonly eos_token_id: number | Array<number> | null
}

const tmp = Effect.flatMap(FileSystem.FileSystem, (fs) => fs.makeTempDirectoryScoped({ prefix: "envtrain-hf-" }))

/** envtrain's scoring and greedy generation of a directory, as the trainers do it on the CPU backend. */
const envtrainRun = (
  dir: string,
  sequences: ReadonlyArray<ReadonlyArray<number>>,
  prompts: ReadonlyArray<ReadonlyArray<number>>
) =>
  Effect.gen(function*() {
    const ckpt = yield* Checkpoint.load(dir)
    const model = Trainer.referenceModel(ckpt)
    const logprobs: Array<Array<number>> = []
    for (const seq of sequences) {
      const scores = yield* model.score({
        prompts: [seq.slice(0, 1)],
        completions: [seq.slice(1)],
        length: seq.length - 1
      }, 1)
      logprobs.push(Array.from(scores.logprobs))
    }
    const stopTokenIds = ckpt.tokenizer.eosTokenIds
    const completions = yield* model.generate(
      prompts.map((promptIds) => ({ promptIds, sampling: { maxTokens: NEW_TOKENS, temperature: 0, stopTokenIds } }))
    )
    return { ckpt, logprobs, greedy: completions.map((c) => [...c.tokenIds]), stopTokenIds }
  })

/** Compares transformers' answers for a directory with envtrain's. */
const compare = (
  name: string,
  hf: Scored,
  ours: { readonly logprobs: Array<Array<number>>; readonly greedy: Array<Array<number>> },
  stopTokenIds: ReadonlyArray<number>
) => {
  assert.strictEqual(ours.logprobs.length, hf.logprobs.length, name)
  hf.logprobs.forEach((row, s) => {
    assert.strictEqual(ours.logprobs[s].length, row.length, `${name}: sequence ${s} length`)
    row.forEach((x, i) => {
      assert.isBelow(
        Math.abs(x - ours.logprobs[s][i]),
        TOLERANCE,
        `${name}: logprob of token ${i + 1} of sequence ${s}: ${x} vs ${ours.logprobs[s][i]}`
      )
    })
  })
  assert.deepStrictEqual(ours.greedy, hf.greedy, `${name}: greedy tokens`)
  const eos = hf.eos_token_id === null ? [] : typeof hf.eos_token_id === "number" ? [hf.eos_token_id] : hf.eos_token_id
  assert.sameMembers([...stopTokenIds], eos, `${name}: envtrain stops where generate stops`)
}

describe("transformers judges envtrain's model directories", () => {
  it.scoped(
    "(a) what envtrain saves loads in transformers: same logprobs, greedy tokens, tokenizer and template",
    () =>
      Effect.gen(function*() {
        const path = yield* Path.Path
        const root = yield* tmp
        const dirs = {
          f32: path.join(root, "tiny"),
          bf16: path.join(root, "tiny-bf16"),
          sharded: path.join(root, "tiny-sharded"),
          trained: ""
        }
        yield* Checkpoint.initModel({ preset: "tiny", out: dirs.f32, seed: 3 })
        yield* Checkpoint.initModel({ preset: "tiny", out: dirs.bf16, seed: 4, dtype: "BF16" })
        const made = yield* Checkpoint.makeModel("tiny", 5)
        yield* Checkpoint.save(dirs.sharded, made, { maxShardBytes: 200_000 })
        const fs = yield* FileSystem.FileSystem
        assert.include(yield* fs.readDirectory(dirs.sharded), "model.safetensors.index.json")

        // Texts in envtrain's own template and tokenizer: a tool conversation and plain text.
        const tiny = yield* Checkpoint.load(dirs.f32)
        const chat = yield* tiny.chatTemplate.render({
          messages: chatCases[5].messages,
          tools: chatCases[5].tools ?? [],
          addGenerationPrompt: true
        })
        const sequences = [tiny.tokenizer.encode(chat).slice(0, 160), tiny.tokenizer.encode(texts[21] + texts[2])]
        const prompts = sequences.map((s) => s.slice(0, PROMPT_TOKENS))

        // One training step on the CPU backend (AdamW, lr 1e-2 moves every weight, norms included), saved as the
        // trainers save a checkpoint.
        const trainee = Trainer.referenceModel(tiny)
        const target = sequences[0]
        yield* trainee.accumulate(
          { prompts: [target.slice(0, 1)], completions: [target.slice(1)], length: target.length - 1 },
          1,
          (scores) => scores.logprobs.map(() => -1 / (target.length - 1))
        )
        yield* trainee.step({
          learningRate: 1e-2,
          maxGradNorm: 1,
          beta1: 0.9,
          beta2: 0.999,
          epsilon: 1e-8,
          weightDecay: 0.01
        })
        dirs.trained = yield* TrainerState.save(path.join(root, "run"), trainee, {
          kind: "sft",
          globalStep: 1,
          totalSteps: 1,
          position: { epoch: 0, batch: 1 },
          seed: 0,
          numTokens: target.length,
          config: {}
        })

        const names = Object.keys(dirs) as Array<keyof typeof dirs>
        const hf = yield* judge<{
          score: { models: Array<Scored> }
          tokenize: { ids: Array<Array<number>>; decoded: Array<string> }
          render: { texts: Array<string>; ids: Array<Array<number>> }
        }>(["score", "tokenize", "render"], {
          score: {
            models: names.map((n) => ({ dir: dirs[n], sequences, prompts, max_new_tokens: NEW_TOKENS }))
          },
          tokenize: { dir: dirs.f32, texts },
          render: { dir: dirs.f32, cases: chatCases }
        })

        for (const [i, name] of names.entries()) {
          const ours = yield* envtrainRun(dirs[name], sequences, prompts)
          assert.strictEqual(hf.score.models[i].dir, dirs[name])
          assert.isTrue(hf.score.models[i].tied, `${name}: tied as envtrain saved it`)
          compare(name, hf.score.models[i], ours, ours.stopTokenIds)
        }
        // The step changed the weights (a trained checkpoint that scored like the untrained one would test nothing).
        assert.notDeepEqual(hf.score.models[3].logprobs, hf.score.models[0].logprobs)

        // AutoTokenizer on envtrain's trained tokenizer.json, and apply_chat_template on envtrain's template.
        texts.forEach((text, i) => {
          assert.deepStrictEqual(
            tiny.tokenizer.encode(text),
            hf.tokenize.ids[i],
            `ids of text ${i} ${JSON.stringify(text)}`
          )
          assert.strictEqual(tiny.tokenizer.decode(hf.tokenize.ids[i]), hf.tokenize.decoded[i], `decoding of text ${i}`)
        })
        for (const [i, c] of chatCases.entries()) {
          const text = yield* tiny.chatTemplate.render({
            messages: c.messages,
            ...(c.tools === undefined ? {} : { tools: c.tools }),
            addGenerationPrompt: c.add_generation_prompt,
            ...(c.enable_thinking === undefined ? {} : { enableThinking: c.enable_thinking })
          })
          assert.strictEqual(text, hf.render.texts[i], `envtrain's template, "${c.name}"`)
          assert.deepStrictEqual(tiny.tokenizer.encode(text), hf.render.ids[i], `envtrain's template ids, "${c.name}"`)
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    600_000
  )

  it.scoped(
    "(b) Qwen3 models saved by transformers load in envtrain: f32, bf16, tied, untied, sharded",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const root = yield* tmp
        const variants = [
          { name: "f32-tied", tie: true, dtype: "float32" },
          { name: "f32-untied", tie: false, dtype: "float32" },
          { name: "bf16-tied", tie: true, dtype: "bfloat16" },
          { name: "bf16-untied", tie: false, dtype: "bfloat16" },
          { name: "f32-untied-sharded", tie: false, dtype: "float32", max_shard_size: "20MB" }
        ] as const
        // Qwen3's real tokenizer and template make the texts, as for a user's own Qwen3 directory.
        const qwen = yield* Tokenizer.Tokenizer.load(QWEN3_DIR)
        const template = yield* ChatTemplate.ChatTemplate.load(QWEN3_DIR)
        const chat = yield* template.render({
          messages: chatCases[4].messages,
          tools: chatCases[4].tools ?? [],
          addGenerationPrompt: true,
          enableThinking: false
        })
        const sequences = [qwen.encode(chat).slice(-64), qwen.encode(texts[12] + texts[13] + texts[22])]
        const prompts = sequences.map((s) => s.slice(0, PROMPT_TOKENS))
        const hf = yield* judge<{
          make: { made: Array<{ name: string; dir: string; files: Array<string> }> }
          score: { models: Array<Scored> }
        }>(["make", "score"], {
          make: { out: root, tokenizer_dir: QWEN3_DIR, seed: 11, variants },
          score: {
            models: variants.map((v) => ({
              dir: `${root}/${v.name}`,
              sequences,
              prompts,
              max_new_tokens: NEW_TOKENS
            }))
          }
        })
        for (const [i, v] of variants.entries()) {
          const made = hf.make.made[i]
          assert.strictEqual(made.name, v.name)
          const sharded = "max_shard_size" in v
          assert.strictEqual(made.files.includes("model.safetensors.index.json"), sharded, `${v.name}: index json`)
          assert.strictEqual(made.files.filter((f) => f.endsWith(".safetensors")).length > 1, sharded)
          const ours = yield* envtrainRun(made.dir, sequences, prompts)
          assert.strictEqual(ours.ckpt.config.tie_word_embeddings, v.tie, `${v.name}: tie_word_embeddings`)
          assert.strictEqual(ours.ckpt.config.torch_dtype, v.dtype, `${v.name}: dtype`)
          assert.strictEqual(ours.ckpt.config.rope_theta, 1_000_000, `${v.name}: rope_theta from rope_parameters`)
          assert.strictEqual(hf.score.models[i].tied, v.tie)
          compare(v.name, hf.score.models[i], ours, ours.stopTokenIds)
          // The directory's template and tokenizer as transformers saved them are the ones it was given.
          assert.strictEqual(ours.ckpt.tokenizer.encode(chat).length, qwen.encode(chat).length)
          assert.strictEqual(
            yield* ours.ckpt.chatTemplate.render({
              messages: chatCases[4].messages,
              tools: chatCases[4].tools ?? [],
              addGenerationPrompt: true,
              enableThinking: false
            }),
            chat
          )
          yield* fs.remove(made.dir, { recursive: true })
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    600_000
  )
})
