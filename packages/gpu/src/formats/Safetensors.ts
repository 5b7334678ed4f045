/**
 * The safetensors format: an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape
 * and byte range, then the raw data. Read (F32, F16, BF16, F64 → Float32Array; bf16 widening is exact) and write
 * (F32, or BF16/F16 rounded to nearest even), single-file or sharded with `model.safetensors.index.json` as
 * transformers does.
 *
 * Reading opens the file once, parses only the header, and reads each tensor's byte range when asked, so a
 * multi-GB checkpoint never has to sit in memory as one buffer. Every malformed input (truncated file, header
 * length or offsets past the end, unknown dtype, byte count that disagrees with the shape) fails with a
 * {@link SafetensorsCorrupt} that names the file and the problem.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { NodeContext } from "@effect/platform-node"
 * import { Safetensors } from "@envtrain/gpu"
 *
 * const program = Effect.gen(function*() {
 *   const ckpt = yield* Safetensors.openCheckpoint("Qwen3-0.6B")
 *   const embed = yield* ckpt.read("model.embed_tokens.weight") // Float32Array
 *   yield* Safetensors.writeCheckpoint("out", new Map([["w", { shape: [2], data: new Float32Array([1, 2]) }]]))
 * }).pipe(Effect.scoped, Effect.provide(NodeContext.layer))
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import type { PlatformError } from "@effect/platform/Error"
import { Data, Effect } from "effect"
import type { Scope } from "effect"
import {
  bf16ToF32,
  bytesToF32,
  f16BitsToF32,
  f16ToF32,
  f32ToBf16,
  f32ToBytes,
  f32ToF16,
  f32ToF16Bits
} from "./internal/dtype.js"

/** A tensor in memory: row-major f32 data and its shape. */
export interface Tensor {
  readonly shape: ReadonlyArray<number>
  readonly data: Float32Array
}

/** Named tensors; iteration order is the order they are written in. */
export type Tensors = ReadonlyMap<string, Tensor>

/** Dtypes the safetensors format defines, with their element sizes in bytes. */
export const DTYPE_SIZES = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E5M2: 1,
  F8_E4M3: 1,
  I16: 2,
  U16: 2,
  F16: 2,
  BF16: 2,
  I32: 4,
  U32: 4,
  F32: 4,
  F64: 8,
  I64: 8,
  U64: 8
} as const
/** A safetensors dtype name (`BOOL`, `U8`, …, `BF16`, `F16`, `F32`, …). */
export type Dtype = keyof typeof DTYPE_SIZES

/** Dtypes that can be read into f32. */
export const READABLE_DTYPES: ReadonlyArray<Dtype> = ["F32", "F16", "BF16", "F64"]
/** Dtypes that can be written. */
export type WriteDtype = "F32" | "BF16" | "F16"

/** One tensor's entry in a header. Offsets are absolute positions in the file. */
export interface TensorInfo {
  readonly name: string
  readonly dtype: Dtype
  readonly shape: ReadonlyArray<number>
  readonly start: number
  readonly end: number
}

/** A parsed header. */
export interface Header {
  readonly tensors: ReadonlyArray<TensorInfo>
  readonly metadata: Readonly<Record<string, string>> | null
  /** Byte position where the data section begins (8 + header length). */
  readonly dataStart: number
}

/** The file is not valid safetensors (truncated, corrupt, or not safetensors at all). */
export class SafetensorsCorrupt extends Data.TaggedError("SafetensorsCorrupt")<{
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `${this.path} is not a valid safetensors file: ${this.problem}. ` +
      `If it was downloaded or saved by an interrupted process, fetch or save it again.`
  }
}

/** A tensor is stored in a dtype that cannot be converted to f32 (integers, fp8, booleans). */
export class UnsupportedDtype extends Data.TaggedError("UnsupportedDtype")<{
  readonly path: string
  readonly name: string
  readonly dtype: string
}> {
  override get message() {
    return `Tensor "${this.name}" in ${this.path} is stored as ${this.dtype}; only ${READABLE_DTYPES.join(", ")} ` +
      `can be loaded as float32. Convert the checkpoint to bf16/f16/f32 first.`
  }
}

/** A tensor that should be there is not. */
export class MissingTensor extends Data.TaggedError("MissingTensor")<{
  readonly name: string
  readonly path: string
  readonly available: number
}> {
  override get message() {
    return `Tensor "${this.name}" is missing from ${this.path} (it holds ${this.available} other tensors). ` +
      `The checkpoint does not match its config.json, or a shard is missing.`
  }
}

/** A tensor has a different shape than the config implies. */
export class TensorShapeMismatch extends Data.TaggedError("TensorShapeMismatch")<{
  readonly name: string
  readonly path: string
  readonly expected: ReadonlyArray<number>
  readonly found: ReadonlyArray<number>
}> {
  override get message() {
    return `Tensor "${this.name}" in ${this.path} has shape [${this.found.join(", ")}] but config.json implies ` +
      `[${this.expected.join(", ")}]. The weights belong to a different model size than config.json describes.`
  }
}

/** Reading or writing the file failed at the OS level (missing file, permissions, disk full). */
export class SafetensorsIoError extends Data.TaggedError("SafetensorsIoError")<{
  readonly path: string
  readonly detail: string
}> {
  override get message() {
    return `Cannot access ${this.path}: ${this.detail}`
  }
}

/** Every way reading or writing safetensors can fail. */
export type SafetensorsError =
  | SafetensorsCorrupt
  | UnsupportedDtype
  | MissingTensor
  | TensorShapeMismatch
  | SafetensorsIoError

const ioError = (path: string) => (e: PlatformError) => new SafetensorsIoError({ path, detail: e.message })

const MAX_HEADER_BYTES = 100_000_000

const isDtype = (s: unknown): s is Dtype => typeof s === "string" && Object.hasOwn(DTYPE_SIZES, s)

const numel = (shape: ReadonlyArray<number>) => shape.reduce((a, b) => a * b, 1)

/**
 * Parse a header from the JSON bytes that follow the 8-byte length. `fileSize` bounds the offsets.
 * Pure, so it is shared by the streaming reader and {@link decode}.
 */
export const parseHeader = (
  json: Uint8Array,
  fileSize: number,
  path: string
): Effect.Effect<Header, SafetensorsCorrupt> =>
  Effect.gen(function*() {
    const corrupt = (problem: string) => new SafetensorsCorrupt({ path, problem })
    let parsed: unknown
    try {
      parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(json))
    } catch (e) {
      return yield* corrupt(`the header is not valid UTF-8 JSON (${(e as Error).message})`)
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      return yield* corrupt("the header is not a JSON object")
    }
    const dataStart = 8 + json.length
    const dataSize = fileSize - dataStart
    let metadata: Record<string, string> | null = null
    const tensors: Array<TensorInfo> = []
    for (const [name, entry] of Object.entries(parsed as Record<string, unknown>)) {
      if (name === "__metadata__") {
        if (typeof entry !== "object" || entry === null || Object.values(entry).some((v) => typeof v !== "string")) {
          return yield* corrupt(`"__metadata__" must map strings to strings`)
        }
        metadata = entry as Record<string, string>
        continue
      }
      const e = entry as { dtype?: unknown; shape?: unknown; data_offsets?: unknown }
      if (typeof e !== "object" || e === null) return yield* corrupt(`the entry of tensor "${name}" is not an object`)
      if (!isDtype(e.dtype)) {
        return yield* corrupt(
          `tensor "${name}" has dtype ${JSON.stringify(e.dtype)}, which is not a safetensors dtype ` +
            `(${Object.keys(DTYPE_SIZES).join(", ")})`
        )
      }
      const shape = e.shape
      if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
        return yield* corrupt(`tensor "${name}" has shape ${JSON.stringify(shape)}; expected a list of sizes`)
      }
      const off = e.data_offsets
      if (
        !Array.isArray(off) || off.length !== 2 || !off.every((o) => Number.isSafeInteger(o) && o >= 0) ||
        off[0] > off[1]
      ) {
        return yield* corrupt(`tensor "${name}" has data_offsets ${JSON.stringify(off)}; expected [begin, end]`)
      }
      if (off[1] > dataSize) {
        return yield* corrupt(
          `tensor "${name}" ends at data offset ${off[1]}, past the end of the data section (${dataSize} bytes): ` +
            `the file is truncated`
        )
      }
      const want = numel(shape) * DTYPE_SIZES[e.dtype]
      if (off[1] - off[0] !== want) {
        return yield* corrupt(
          `tensor "${name}" spans ${off[1] - off[0]} bytes but shape [${shape.join(", ")}] in ${e.dtype} needs ${want}`
        )
      }
      tensors.push({ name, dtype: e.dtype, shape, start: dataStart + off[0], end: dataStart + off[1] })
    }
    // Data order, which is also the order the writer reproduces byte for byte.
    tensors.sort((a, b) => a.start - b.start)
    return { tensors, metadata, dataStart }
  })

const headerLength = (prefix: Uint8Array, fileSize: number, path: string) =>
  Effect.gen(function*() {
    if (fileSize < 8) {
      return yield* new SafetensorsCorrupt({
        path,
        problem: `the file is ${fileSize} bytes, shorter than the 8-byte header length: it is truncated`
      })
    }
    const view = new DataView(prefix.buffer, prefix.byteOffset, 8)
    const n = view.getUint32(0, true) + view.getUint32(4, true) * 2 ** 32
    if (n > fileSize - 8) {
      return yield* new SafetensorsCorrupt({
        path,
        problem: `the header length ${n} runs past the end of the file (${fileSize} bytes): it is truncated or not ` +
          `safetensors`
      })
    }
    if (n > MAX_HEADER_BYTES) {
      return yield* new SafetensorsCorrupt({ path, problem: `the header length ${n} exceeds 100 MB` })
    }
    return n
  })

/** Convert one tensor's raw bytes to f32. */
export const toFloat32 = (
  info: TensorInfo,
  bytes: Uint8Array,
  path: string
): Effect.Effect<Float32Array, UnsupportedDtype> => {
  switch (info.dtype) {
    case "F32":
      return Effect.succeed(bytesToF32(bytes))
    case "BF16":
      return Effect.succeed(bf16ToF32(bytes))
    case "F16":
      return Effect.succeed(f16ToF32(bytes))
    case "F64": {
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
      const out = new Float32Array(bytes.length / 8)
      for (let i = 0; i < out.length; i++) out[i] = view.getFloat64(8 * i, true)
      return Effect.succeed(out)
    }
    default:
      return Effect.fail(new UnsupportedDtype({ path, name: info.name, dtype: info.dtype }))
  }
}

/** The header of a whole safetensors file held in memory (its tensors' names, dtypes, shapes, and metadata). */
export const readHeader = (bytes: Uint8Array, path = "<memory>"): Effect.Effect<Header, SafetensorsCorrupt> =>
  Effect.flatMap(
    headerLength(bytes, bytes.length, path),
    (n) => parseHeader(bytes.subarray(8, 8 + n), bytes.length, path)
  )

/** Decode a whole safetensors file held in memory. */
export const decode = (
  bytes: Uint8Array,
  path = "<memory>"
): Effect.Effect<Map<string, Tensor>, SafetensorsCorrupt | UnsupportedDtype> =>
  Effect.gen(function*() {
    const n = yield* headerLength(bytes, bytes.length, path)
    const header = yield* parseHeader(bytes.subarray(8, 8 + n), bytes.length, path)
    const out = new Map<string, Tensor>()
    for (const t of header.tensors) {
      out.set(t.name, { shape: t.shape, data: yield* toFloat32(t, bytes.subarray(t.start, t.end), path) })
    }
    return out
  })

/** Whether every value survives storing in `dtype` unchanged (NaNs aside), so writing it loses nothing. */
export const exactIn = (data: Float32Array, dtype: WriteDtype): boolean => {
  if (dtype === "F32") return true
  if (dtype === "BF16") {
    // bf16 is the top half of an f32: exact exactly when the low 16 bits are zero.
    const bits = new Uint32Array(data.buffer, data.byteOffset, data.length)
    for (let i = 0; i < bits.length; i++) if ((bits[i] & 0xffff) !== 0 && data[i] === data[i]) return false
    return true
  }
  for (let i = 0; i < data.length; i++) {
    const x = data[i]
    if (x === x && f16BitsToF32(f32ToF16Bits(x)) !== x) return false
  }
  return true
}

/** Options for writing. */
export interface WriteOptions {
  /** Stored dtype; default F32 (lossless). BF16/F16 round to nearest even. */
  readonly dtype?: WriteDtype
  /** `__metadata__`; default `{ format: "pt" }`, which transformers requires. */
  readonly metadata?: Readonly<Record<string, string>>
}

const encodeData = (t: Tensor, dtype: WriteDtype): Uint8Array =>
  dtype === "F32" ? f32ToBytes(t.data) : dtype === "BF16" ? f32ToBf16(t.data) : f32ToF16(t.data)

/** Header bytes (length prefix + JSON padded with spaces to 8 bytes, as the reference writer does). */
const encodeHeader = (tensors: Tensors, options: WriteOptions): Uint8Array => {
  const dtype = options.dtype ?? "F32"
  const size = DTYPE_SIZES[dtype]
  const header: Record<string, unknown> = { __metadata__: options.metadata ?? { format: "pt" } }
  let offset = 0
  for (const [name, t] of tensors) {
    if (numel(t.shape) !== t.data.length) {
      throw new Error(`tensor "${name}" has ${t.data.length} values but shape [${t.shape.join(", ")}]`)
    }
    const bytes = t.data.length * size
    header[name] = { dtype, shape: t.shape, data_offsets: [offset, offset + bytes] }
    offset += bytes
  }
  let json = JSON.stringify(header)
  const utf8 = new TextEncoder()
  while ((utf8.encode(json).length) % 8 !== 0) json += " "
  const body = utf8.encode(json)
  const out = new Uint8Array(8 + body.length)
  const view = new DataView(out.buffer)
  view.setUint32(0, body.length, true)
  view.setUint32(4, 0, true)
  out.set(body, 8)
  return out
}

/** Encode tensors as one safetensors file in memory. Throws (a defect) if a tensor's data disagrees with its shape. */
export const encode = (tensors: Tensors, options: WriteOptions = {}): Uint8Array => {
  const dtype = options.dtype ?? "F32"
  const header = encodeHeader(tensors, options)
  const parts = [header, ...Array.from(tensors.values(), (t) => encodeData(t, dtype))]
  const out = new Uint8Array(parts.reduce((a, p) => a + p.length, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}

/** An open safetensors file; tensors are read on demand. */
export interface SafetensorsFile {
  readonly path: string
  readonly header: Header
  readonly info: (name: string) => TensorInfo | undefined
  /** The tensor's stored bytes. */
  readonly readRaw: (name: string) => Effect.Effect<Uint8Array, MissingTensor | SafetensorsIoError>
  /** The tensor converted to f32. */
  readonly read: (name: string) => Effect.Effect<Float32Array, MissingTensor | UnsupportedDtype | SafetensorsIoError>
}

const readExactly = (file: FileSystem.File, position: number, length: number, path: string) =>
  Effect.gen(function*() {
    const out = new Uint8Array(length)
    yield* file.seek(position, "start")
    let got = 0
    while (got < length) {
      const n = Number(yield* file.read(out.subarray(got)).pipe(Effect.mapError(ioError(path))))
      if (n === 0) {
        return yield* new SafetensorsIoError({ path, detail: `unexpected end of file at byte ${position + got}` })
      }
      got += n
    }
    return out
  })

/**
 * Open a safetensors file, reading only its header. The file stays open until the scope closes.
 */
export const open = (
  path: string
): Effect.Effect<SafetensorsFile, SafetensorsCorrupt | SafetensorsIoError, FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const file = yield* fs.open(path, { flag: "r" }).pipe(Effect.mapError(ioError(path)))
    const size = Number((yield* file.stat.pipe(Effect.mapError(ioError(path)))).size)
    const prefix = size >= 8 ? yield* readExactly(file, 0, 8, path) : new Uint8Array(8)
    const n = yield* headerLength(prefix, size, path)
    const header = yield* parseHeader(yield* readExactly(file, 8, n, path), size, path)
    const byName = new Map(header.tensors.map((t) => [t.name, t]))
    // One reader at a time: seek+read on a shared descriptor must not interleave.
    const lock = yield* Effect.makeSemaphore(1)
    const find = (name: string) =>
      Effect.suspend(() => {
        const info = byName.get(name)
        return info
          ? Effect.succeed(info)
          : Effect.fail(new MissingTensor({ name, path, available: header.tensors.length }))
      })
    const readRaw = (name: string) =>
      Effect.flatMap(
        find(name),
        (info) => lock.withPermits(1)(readExactly(file, info.start, info.end - info.start, path))
      )
    return {
      path,
      header,
      info: (name) => byName.get(name),
      readRaw,
      read: (name) =>
        Effect.flatMap(find(name), (info) => Effect.flatMap(readRaw(name), (bytes) => toFloat32(info, bytes, path)))
    } satisfies SafetensorsFile
  })

/** Read every tensor of one file as f32. */
export const readFile = (
  path: string
): Effect.Effect<Map<string, Tensor>, SafetensorsError, FileSystem.FileSystem> =>
  Effect.scoped(Effect.gen(function*() {
    const f = yield* open(path)
    const out = new Map<string, Tensor>()
    for (const t of f.header.tensors) out.set(t.name, { shape: t.shape, data: yield* f.read(t.name) })
    return out
  }))

const writeStreaming = (
  path: string,
  tensors: Tensors,
  options: WriteOptions
): Effect.Effect<void, SafetensorsIoError, FileSystem.FileSystem> =>
  Effect.scoped(Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const dtype = options.dtype ?? "F32"
    const file = yield* fs.open(path, { flag: "w" }).pipe(Effect.mapError(ioError(path)))
    yield* file.writeAll(encodeHeader(tensors, options)).pipe(Effect.mapError(ioError(path)))
    for (const t of tensors.values()) {
      // writeAll treats a zero-byte write as a failure; empty tensors have nothing to write.
      if (t.data.length > 0) yield* file.writeAll(encodeData(t, dtype)).pipe(Effect.mapError(ioError(path)))
    }
  }))

/** Write tensors to one safetensors file, streaming tensor by tensor. */
export const writeFile = (
  path: string,
  tensors: Tensors,
  options: WriteOptions = {}
): Effect.Effect<void, SafetensorsIoError, FileSystem.FileSystem> => writeStreaming(path, tensors, options)

/** The name of the single-file checkpoint and of the shard index, as transformers uses them. */
export const SINGLE_FILE = "model.safetensors"
/** The index of a sharded checkpoint (tensor name → shard file). */
export const INDEX_FILE = "model.safetensors.index.json"

/** Shard file name `model-00001-of-00003.safetensors`. */
export const shardName = (i: number, n: number) =>
  `model-${String(i + 1).padStart(5, "0")}-of-${String(n).padStart(5, "0")}.safetensors`

/** Options for {@link writeCheckpoint}. */
export interface CheckpointWriteOptions extends WriteOptions {
  /** Largest shard in bytes of tensor data; default 5 GiB. One file, `model.safetensors`, when everything fits. */
  readonly maxShardBytes?: number
}

/**
 * Write a checkpoint's tensors into `dir`: `model.safetensors`, or shards plus `model.safetensors.index.json`
 * when the data is larger than `maxShardBytes`. Shards are filled greedily in tensor order, as transformers does.
 * Returns the file names written.
 */
export const writeCheckpoint = (
  dir: string,
  tensors: Tensors,
  options: CheckpointWriteOptions = {}
): Effect.Effect<ReadonlyArray<string>, SafetensorsIoError, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    yield* fs.makeDirectory(dir, { recursive: true }).pipe(Effect.mapError(ioError(dir)))
    const size = DTYPE_SIZES[options.dtype ?? "F32"]
    const max = options.maxShardBytes ?? 5 * 2 ** 30
    const shards: Array<Map<string, Tensor>> = [new Map()]
    let current = 0
    let total = 0
    for (const [name, t] of tensors) {
      const bytes = t.data.length * size
      if (current > 0 && current + bytes > max) {
        shards.push(new Map())
        current = 0
      }
      shards[shards.length - 1].set(name, t)
      current += bytes
      total += bytes
    }
    if (shards.length === 1) {
      yield* writeStreaming(path.join(dir, SINGLE_FILE), tensors, options)
      return [SINGLE_FILE]
    }
    const names = shards.map((_, i) => shardName(i, shards.length))
    const weightMap: Record<string, string> = {}
    for (let i = 0; i < shards.length; i++) {
      yield* writeStreaming(path.join(dir, names[i]), shards[i], options)
      for (const name of shards[i].keys()) weightMap[name] = names[i]
    }
    const index = { metadata: { total_size: total }, weight_map: weightMap }
    const indexPath = path.join(dir, INDEX_FILE)
    yield* fs.writeFileString(indexPath, JSON.stringify(index, null, 2) + "\n").pipe(
      Effect.mapError(ioError(indexPath))
    )
    return [...names, INDEX_FILE]
  })

/** A checkpoint (one file or shards) opened for reading by tensor name. */
export interface CheckpointFiles {
  readonly dir: string
  /** Tensor names in storage order (shard by shard, data order within a shard). */
  readonly names: ReadonlyArray<string>
  readonly info: (name: string) => TensorInfo | undefined
  readonly read: (name: string) => Effect.Effect<Float32Array, MissingTensor | UnsupportedDtype | SafetensorsIoError>
  readonly readRaw: (name: string) => Effect.Effect<Uint8Array, MissingTensor | SafetensorsIoError>
}

/**
 * Open the safetensors of a model directory: `model.safetensors.index.json` and its shards if the index exists,
 * else `model.safetensors`. Only headers are read here; shards stay open until the scope closes.
 */
export const openCheckpoint = (
  dir: string
): Effect.Effect<
  CheckpointFiles,
  SafetensorsCorrupt | SafetensorsIoError,
  FileSystem.FileSystem | Path.Path | Scope.Scope
> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const indexPath = path.join(dir, INDEX_FILE)
    const files: Array<SafetensorsFile> = []
    if (yield* fs.exists(indexPath).pipe(Effect.mapError(ioError(indexPath)))) {
      const text = yield* fs.readFileString(indexPath).pipe(Effect.mapError(ioError(indexPath)))
      let weightMap: Record<string, unknown>
      try {
        weightMap = JSON.parse(text).weight_map
      } catch (e) {
        return yield* new SafetensorsCorrupt({ path: indexPath, problem: `not valid JSON (${(e as Error).message})` })
      }
      if (typeof weightMap !== "object" || weightMap === null) {
        return yield* new SafetensorsCorrupt({ path: indexPath, problem: `it has no "weight_map" object` })
      }
      const shardFiles = [...new Set(Object.values(weightMap))]
      for (const f of shardFiles) {
        if (typeof f !== "string") {
          return yield* new SafetensorsCorrupt({ path: indexPath, problem: `weight_map value ${JSON.stringify(f)}` })
        }
        files.push(yield* open(path.join(dir, f)))
      }
      // The index must agree with the shards, or a read would silently come from the wrong place.
      for (const [name, f] of Object.entries(weightMap)) {
        const file = files[shardFiles.indexOf(f)]
        if (file.info(name) === undefined) {
          return yield* new SafetensorsCorrupt({
            path: indexPath,
            problem: `it maps tensor "${name}" to ${f as string}, which does not contain it`
          })
        }
      }
    } else {
      const single = path.join(dir, SINGLE_FILE)
      if (!(yield* fs.exists(single).pipe(Effect.mapError(ioError(single))))) {
        return yield* new SafetensorsIoError({
          path: dir,
          detail: `neither ${SINGLE_FILE} nor ${INDEX_FILE} exists; is this a Hugging Face model directory?`
        })
      }
      files.push(yield* open(single))
    }
    const owner = new Map<string, SafetensorsFile>()
    const names: Array<string> = []
    for (const f of files) {
      for (const t of f.header.tensors) {
        if (!owner.has(t.name)) names.push(t.name)
        owner.set(t.name, f)
      }
    }
    const missing = (name: string) => new MissingTensor({ name, path: dir, available: names.length })
    return {
      dir,
      names,
      info: (name) => owner.get(name)?.info(name),
      read: (name) => {
        const f = owner.get(name)
        return f ? f.read(name) : Effect.fail(missing(name))
      },
      readRaw: (name) => {
        const f = owner.get(name)
        return f ? f.readRaw(name) : Effect.fail(missing(name))
      }
    } satisfies CheckpointFiles
  })
