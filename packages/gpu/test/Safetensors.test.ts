import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FastCheck } from "effect"
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToBf16Bits, f32ToF16Bits } from "../src/formats/internal/dtype.js"
import * as Safetensors from "../src/formats/Safetensors.js"

const u16 = (bits: number) => new Uint8Array([bits & 0xff, bits >>> 8])

const sample = (): Map<string, Safetensors.Tensor> =>
  new Map([
    ["a.weight", { shape: [2, 3], data: new Float32Array([1, -2, 3.5, 1e-30, -0, 65504]) }],
    ["b", { shape: [], data: new Float32Array([0.1]) }],
    ["empty", { shape: [0, 4], data: new Float32Array(0) }],
    ["c.bias", { shape: [3], data: new Float32Array([Infinity, -Infinity, 7]) }]
  ])

const failure = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.flip(effect)

describe("dtype conversion", () => {
  it("bf16 → f32 → bf16 is the identity on every non-NaN bit pattern", () => {
    for (let bits = 0; bits < 0x10000; bits++) {
      const f = bf16ToF32(u16(bits))[0]
      if (Number.isNaN(f)) continue
      assert.strictEqual(f32ToBf16Bits(f), bits)
    }
  })

  it("bf16 widening is the top half of the f32 bits", () => {
    const out = bf16ToF32(u16(0x3f80))
    assert.strictEqual(out[0], 1)
    assert.strictEqual(bf16ToF32(u16(0xc0a0))[0], -5)
    assert.strictEqual(bf16ToF32(u16(0x0001))[0], 2 ** -133) // smallest subnormal
  })

  it("f32 → bf16 rounds to nearest, ties to even", () => {
    // 1 + 2^-8 is exactly halfway between bf16 1 (even) and 1 + 2^-7: ties go to the even one.
    assert.strictEqual(f32ToBf16Bits(1 + 2 ** -8), 0x3f80)
    // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
    assert.strictEqual(f32ToBf16Bits(1 + 3 * 2 ** -8), 0x3f82)
    // Just above halfway rounds up.
    assert.strictEqual(f32ToBf16Bits(1 + 2 ** -8 + 2 ** -20), 0x3f81)
    assert.strictEqual(f32ToBf16Bits(3.4e38), 0x7f80) // rounds past the largest bf16 to +inf
    assert.isTrue(Number.isNaN(bf16ToF32(f32ToBf16(new Float32Array([NaN])))[0]))
  })

  it("f16 → f32 → f16 is the identity on every non-NaN bit pattern", () => {
    for (let bits = 0; bits < 0x10000; bits++) {
      const f = f16ToF32(u16(bits))[0]
      if (Number.isNaN(f)) continue
      assert.strictEqual(f32ToF16Bits(f), bits)
    }
    assert.strictEqual(f16ToF32(u16(0x0001))[0], 2 ** -24)
    assert.strictEqual(f32ToF16Bits(65520), 0x7c00) // halfway past the largest half → inf
  })
})

describe("Safetensors in memory", () => {
  it.effect("decode(encode(t)) returns the same tensors and re-encoding is byte-identical", () =>
    Effect.gen(function*() {
      const bytes = Safetensors.encode(sample())
      const back = yield* Safetensors.decode(bytes)
      assert.deepStrictEqual([...back.keys()], [...sample().keys()])
      for (const [name, t] of sample()) {
        assert.deepStrictEqual(back.get(name)!.shape, t.shape)
        assert.deepStrictEqual(Array.from(back.get(name)!.data), Array.from(t.data))
      }
      assert.deepStrictEqual(Safetensors.encode(back), bytes)
      // The header is padded to 8 bytes and carries transformers' format tag.
      const n = new DataView(bytes.buffer).getUint32(0, true)
      assert.strictEqual(n % 8, 0)
      assert.include(new TextDecoder().decode(bytes.subarray(8, 8 + n)), `"__metadata__":{"format":"pt"}`)
    }))

  it.effect.prop(
    "f32 round trip is byte-identical for any values",
    [FastCheck.array(FastCheck.float({ noNaN: true }), { maxLength: 40 })],
    ([values]) =>
      Effect.gen(function*() {
        const tensors = new Map([["x", { shape: [values.length], data: new Float32Array(values) }]])
        const bytes = Safetensors.encode(tensors)
        assert.deepStrictEqual(Safetensors.encode(yield* Safetensors.decode(bytes)), bytes)
      }),
    { fastCheck: { numRuns: 50 } }
  )

  it.effect("bf16 files load exactly and save as torch would round them", () =>
    Effect.gen(function*() {
      const t = new Map([["w", { shape: [4], data: new Float32Array([1, 1 + 2 ** -8, -2.5, 0.1]) }]])
      const back = yield* Safetensors.decode(Safetensors.encode(t, { dtype: "BF16" }))
      assert.deepStrictEqual(Array.from(back.get("w")!.data), [1, 1, -2.5, bf16ToF32(u16(f32ToBf16Bits(0.1)))[0]])
      const half = yield* Safetensors.decode(Safetensors.encode(t, { dtype: "F16" }))
      assert.strictEqual(half.get("w")!.data[2], -2.5)
    }))

  it.effect("a file shorter than 8 bytes is reported as truncated", () =>
    Effect.gen(function*() {
      const e = yield* failure(Safetensors.decode(new Uint8Array(5), "x.safetensors"))
      assert.strictEqual(e._tag, "SafetensorsCorrupt")
      assert.include(e.message, "x.safetensors")
      assert.include(e.message, "shorter than the 8-byte header length")
    }))

  it.effect("a header length past the end of the file is reported", () =>
    Effect.gen(function*() {
      const bytes = Safetensors.encode(sample())
      const e = yield* failure(Safetensors.decode(bytes.subarray(0, 20)))
      assert.include(e.message, "runs past the end of the file (20 bytes)")
    }))

  it.effect("a truncated data section names the tensor that runs past the end", () =>
    Effect.gen(function*() {
      const bytes = Safetensors.encode(sample())
      const e = yield* failure(Safetensors.decode(bytes.subarray(0, bytes.length - 4)))
      assert.include(e.message, `tensor "c.bias" ends at data offset`)
      assert.include(e.message, "truncated")
    }))

  const withHeader = (header: unknown, data = new Uint8Array(16)) => {
    const json = new TextEncoder().encode(JSON.stringify(header))
    const out = new Uint8Array(8 + json.length + data.length)
    new DataView(out.buffer).setUint32(0, json.length, true)
    out.set(json, 8)
    out.set(data, 8 + json.length)
    return out
  }

  it.effect("bad dtype, bad offsets, size mismatch and bad JSON are each named", () =>
    Effect.gen(function*() {
      const e1 = yield* failure(
        Safetensors.decode(withHeader({ w: { dtype: "F17", shape: [4], data_offsets: [0, 16] } }))
      )
      assert.include(e1.message, `tensor "w" has dtype "F17", which is not a safetensors dtype`)
      const e2 = yield* failure(
        Safetensors.decode(withHeader({ w: { dtype: "F32", shape: [4], data_offsets: [8, 4] } }))
      )
      assert.include(e2.message, "data_offsets [8,4]")
      const e3 = yield* failure(
        Safetensors.decode(withHeader({ w: { dtype: "F32", shape: [3], data_offsets: [0, 16] } }))
      )
      assert.include(e3.message, `spans 16 bytes but shape [3] in F32 needs 12`)
      const bad = withHeader({})
      bad[8] = 0x7b + 1
      const e4 = yield* failure(Safetensors.decode(bad))
      assert.include(e4.message, "not valid UTF-8 JSON")
    }))

  it.effect("integer tensors fail with UnsupportedDtype naming the tensor", () =>
    Effect.gen(function*() {
      const e = yield* failure(
        Safetensors.decode(withHeader({ ids: { dtype: "I64", shape: [2], data_offsets: [0, 16] } }))
      )
      assert.strictEqual(e._tag, "UnsupportedDtype")
      assert.include(e.message, `Tensor "ids" in <memory> is stored as I64`)
    }))
})

describe("Safetensors on disk", () => {
  it.scoped("single file: streaming reads match, a missing tensor is named", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const file = path.join(dir, "m.safetensors")
      yield* Safetensors.writeFile(file, sample())
      assert.deepStrictEqual(yield* fs.readFile(file), Safetensors.encode(sample()))
      const f = yield* Safetensors.open(file)
      assert.deepStrictEqual(Array.from(yield* f.read("c.bias")), [Infinity, -Infinity, 7])
      const e = yield* failure(f.read("nope"))
      assert.strictEqual(e._tag, "MissingTensor")
      assert.include(e.message, `Tensor "nope" is missing from ${file}`)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("sharded checkpoints: written with an index, read back, loading then saving is byte-identical", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const tensors = new Map<string, Safetensors.Tensor>()
      for (let i = 0; i < 5; i++) {
        tensors.set(`layer.${i}.weight`, {
          shape: [8, 4],
          data: Float32Array.from({ length: 32 }, (_, j) => i + j / 7)
        })
      }
      const written = yield* Safetensors.writeCheckpoint(dir, tensors, { maxShardBytes: 300 })
      assert.deepStrictEqual(written, [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json"
      ])
      const index = JSON.parse(yield* fs.readFileString(path.join(dir, "model.safetensors.index.json")))
      assert.strictEqual(index.metadata.total_size, 5 * 128)
      assert.strictEqual(index.weight_map["layer.4.weight"], "model-00003-of-00003.safetensors")
      const ckpt = yield* Safetensors.openCheckpoint(dir)
      assert.deepStrictEqual(ckpt.names, [...tensors.keys()])
      const loaded = new Map<string, Safetensors.Tensor>()
      for (const name of ckpt.names) loaded.set(name, { shape: ckpt.info(name)!.shape, data: yield* ckpt.read(name) })
      const again = yield* fs.makeTempDirectoryScoped()
      yield* Safetensors.writeCheckpoint(again, loaded, { maxShardBytes: 300 })
      for (const f of written) {
        assert.deepStrictEqual(yield* fs.readFile(path.join(again, f)), yield* fs.readFile(path.join(dir, f)), f)
      }
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("a directory without safetensors says what it looked for", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const e = yield* failure(Safetensors.openCheckpoint(dir))
      assert.include(e.message, "neither model.safetensors nor model.safetensors.index.json exists")
    }).pipe(Effect.provide(NodeContext.layer)))
})
