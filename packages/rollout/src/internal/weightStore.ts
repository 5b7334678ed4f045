// The weight store on a shared directory. Layout:
//   DIR/manifest.json                 the newest version (written beside it, then renamed: readers see all or nothing)
//   DIR/weights/v00000042.safetensors one file per kept version (renamed into place before the manifest names it)
//   DIR/servers/<id>.json             policy servers that follow the store, refreshed while they run (discovery)
// Readers trust nothing: the file's size, sha256 and the model's config hash are checked against the manifest.
import { Data, Duration, Effect, Option } from "effect"
import { createHash, randomUUID } from "node:crypto"
import * as NodeFsSync from "node:fs"
import * as NodeFs from "node:fs/promises"
import * as NodePath from "node:path"

export const FORMAT = "envtrain-weights/1"
export const MANIFEST = "manifest.json"
const WEIGHTS = "weights"
const SERVERS = "servers"

export interface Manifest {
  readonly format: typeof FORMAT
  /** Counts publications in this store, from 1; a policy server that loads it reports it as its `policy_version`. */
  readonly policy_version: number
  /** The trainer's optimizer step these weights have. */
  readonly step: number
  /** Relative to the store's directory. */
  readonly file: string
  readonly sha256: string
  readonly bytes: number
  readonly dtype: "F32" | "BF16" | "F16"
  readonly config_hash: string
  readonly published_at: string
}

export class WeightStoreError extends Data.TaggedError("WeightStoreError")<{
  readonly directory: string
  readonly problem: string
}> {
  override get message() {
    return `Weight store ${this.directory}: ${this.problem}`
  }
}

const fail = (directory: string, problem: string) => new WeightStoreError({ directory, problem })
const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e))
const isMissing = (e: unknown) => (e as { code?: unknown }).code === "ENOENT"

// Over a model's config.json object: the fields that fix the tensors' names, shapes and the model's arithmetic; not
// torch_dtype (storage only) or other keys, which may differ between the trainer's and a server's copy of one model.
export const configHash = (json: Readonly<Record<string, unknown>>): string => {
  const keys = [
    "architectures",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_theta",
    "tie_word_embeddings"
  ]
  return sha256(new TextEncoder().encode(JSON.stringify(keys.map((k) => [k, json[k]]))))
}

export const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex")

const versionFile = (version: number) => `${WEIGHTS}/v${String(version).padStart(8, "0")}.safetensors`
const versionOfFile = (name: string): number | undefined => {
  const m = /^v(\d+)\.safetensors/.exec(name)
  return m === null ? undefined : Number(m[1])
}

// Written beside the target, flushed, then renamed over it: a reader sees the old file or the whole new one.
const writeAtomic = async (target: string, bytes: Uint8Array | string) => {
  const partial = `${target}.partial-${process.pid}-${randomUUID().slice(0, 8)}`
  const handle = await NodeFs.open(partial, "w")
  try {
    await handle.writeFile(bytes)
    await handle.sync()
  } finally {
    await handle.close()
  }
  await NodeFs.rename(partial, target)
}

const decodeManifest = (directory: string, text: string): Effect.Effect<Manifest, WeightStoreError> => {
  let json: Record<string, unknown>
  try {
    json = JSON.parse(text) as Record<string, unknown>
  } catch (e) {
    return Effect.fail(fail(directory, `${MANIFEST} is not JSON (${errorText(e)})`))
  }
  if (json.format !== FORMAT) {
    return Effect.fail(
      fail(directory, `${MANIFEST} has format ${JSON.stringify(json.format)}, expected "${FORMAT}"`)
    )
  }
  const numbers = ["policy_version", "step", "bytes"] as const
  const strings = ["file", "sha256", "dtype", "config_hash"] as const
  for (const k of numbers) {
    if (!Number.isInteger(json[k]) || (json[k] as number) < 0) {
      return Effect.fail(fail(directory, `${MANIFEST}: ${k} must be a whole number, got ${JSON.stringify(json[k])}`))
    }
  }
  for (const k of strings) {
    if (typeof json[k] !== "string") {
      return Effect.fail(fail(directory, `${MANIFEST}: ${k} must be a string, got ${JSON.stringify(json[k])}`))
    }
  }
  if ((json.file as string).includes("..") || NodePath.isAbsolute(json.file as string)) {
    return Effect.fail(fail(directory, `${MANIFEST}: file ${json.file as string} is outside the store`))
  }
  return Effect.succeed(json as unknown as Manifest)
}

/** The newest published version, or none for a store nobody has published to yet. */
export const latest = (directory: string): Effect.Effect<Option.Option<Manifest>, WeightStoreError> =>
  Effect.tryPromise({
    try: () => NodeFs.readFile(NodePath.join(directory, MANIFEST), "utf8").then((t) => Option.some(t)),
    catch: (e) => e
  }).pipe(
    Effect.catchAll((e) =>
      isMissing(e)
        ? Effect.succeed(Option.none<string>())
        : Effect.fail(fail(directory, `reading ${MANIFEST} failed: ${errorText(e)}`))
    ),
    Effect.flatMap(Option.match({
      onNone: () => Effect.succeedNone,
      onSome: (text) => Effect.map(decodeManifest(directory, text), Option.some)
    }))
  )

export interface PublishOptions {
  readonly bytes: Uint8Array
  readonly step: number
  readonly configHash: string
  /** The safetensors file's dtype (recorded only). Default F32. */
  readonly dtype?: Manifest["dtype"]
  /** Versions kept on disk, the new one included; older ones are deleted. Default 3, at least 2. */
  readonly keep?: number
}

/**
 * Writes the weights as the next version, then the manifest naming it, then deletes all but the newest `keep`
 * versions. The version follows the store's newest, so a restarted trainer continues the count and followers never
 * see a version go backwards.
 */
export const publish = (directory: string, options: PublishOptions): Effect.Effect<Manifest, WeightStoreError> =>
  Effect.gen(function*() {
    const keep = options.keep ?? 3
    if (!Number.isInteger(keep) || keep < 2) {
      // One version alone would be deleted under a follower still reading it.
      return yield* fail(directory, `keep must be a whole number >= 2 (the version being read stays), got ${keep}`)
    }
    const previous = yield* latest(directory)
    const version = Option.match(previous, { onNone: () => 1, onSome: (m) => m.policy_version + 1 })
    const manifest: Manifest = {
      format: FORMAT,
      policy_version: version,
      step: options.step,
      file: versionFile(version),
      sha256: sha256(options.bytes),
      bytes: options.bytes.length,
      dtype: options.dtype ?? "F32",
      config_hash: options.configHash,
      published_at: new Date().toISOString()
    }
    yield* Effect.tryPromise({
      try: async () => {
        await NodeFs.mkdir(NodePath.join(directory, WEIGHTS), { recursive: true })
        await writeAtomic(NodePath.join(directory, manifest.file), options.bytes)
        await writeAtomic(NodePath.join(directory, MANIFEST), JSON.stringify(manifest, null, 2) + "\n")
      },
      catch: (e) => fail(directory, `publishing version ${version} failed: ${errorText(e)}`)
    })
    yield* collect(directory, version - keep + 1)
    return manifest
  })

// Deletes version files (and partial writes) below `oldestKept`; a follower still reading one keeps its open file.
const collect = (directory: string, oldestKept: number) =>
  Effect.tryPromise({
    try: async () => {
      const dir = NodePath.join(directory, WEIGHTS)
      for (const name of await NodeFs.readdir(dir)) {
        const v = versionOfFile(name)
        if (v !== undefined && v < oldestKept) await NodeFs.rm(NodePath.join(dir, name), { force: true })
      }
    },
    catch: (e) => fail(directory, `deleting old versions failed: ${errorText(e)}`)
  })

export interface ReadOptions {
  /** Refuse weights published for another model (see {@link configHash}). */
  readonly configHash?: string
}

/** The weights a manifest names, checked: the whole file (size), unchanged (sha256), for this model (config hash). */
export const read = (
  directory: string,
  manifest: Manifest,
  options: ReadOptions = {}
): Effect.Effect<Uint8Array, WeightStoreError> =>
  Effect.gen(function*() {
    const path = NodePath.join(directory, manifest.file)
    const what = `version ${manifest.policy_version} (${path})`
    if (options.configHash !== undefined && options.configHash !== manifest.config_hash) {
      return yield* fail(
        directory,
        `${what} was published for another model (config hash ${manifest.config_hash.slice(0, 12)}…, this ` +
          `server's model ${options.configHash.slice(0, 12)}…): serve the model the trainer trains, or give this ` +
          "server a store of its own"
      )
    }
    const bytes = yield* Effect.tryPromise({
      try: () => NodeFs.readFile(path),
      catch: (e) =>
        fail(
          directory,
          isMissing(e)
            ? `${what} is missing (deleted as older than the kept versions, or never written)`
            : `reading ${what} failed: ${errorText(e)}`
        )
    })
    if (bytes.length !== manifest.bytes) {
      return yield* fail(
        directory,
        `${what} is partial or overwritten: ${bytes.length} bytes, the manifest says ${manifest.bytes}`
      )
    }
    const digest = sha256(bytes)
    if (digest !== manifest.sha256) {
      return yield* fail(
        directory,
        `${what} is corrupt: sha256 ${digest.slice(0, 16)}…, the manifest says ${manifest.sha256.slice(0, 16)}…`
      )
    }
    return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length)
  })

/** A policy server that follows the store, as it registers itself under `servers/`. */
export interface Registration {
  readonly url: string
  readonly pid: number
  readonly started_at: string
}

/**
 * Registers `url` under `servers/` until the scope closes, touching the file every `heartbeat` so that readers can
 * tell a live server from one that died without removing it.
 */
export const register = (directory: string, url: string, heartbeat: Duration.DurationInput) =>
  Effect.gen(function*() {
    const dir = NodePath.join(directory, SERVERS)
    const file = NodePath.join(dir, `${url.replace(/[^A-Za-z0-9]+/g, "_")}.json`)
    const entry: Registration = { url, pid: process.pid, started_at: new Date().toISOString() }
    yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: async () => {
          await NodeFs.mkdir(dir, { recursive: true })
          await writeAtomic(file, JSON.stringify(entry) + "\n")
        },
        catch: (e) => fail(directory, `registering ${url} in ${dir} failed: ${errorText(e)}`)
      }),
      () => Effect.promise(() => NodeFs.rm(file, { force: true }))
    )
    const touch = Effect.promise(() => {
      const now = new Date()
      return NodeFs.utimes(file, now, now).catch(() => writeAtomic(file, JSON.stringify(entry) + "\n"))
    }).pipe(Effect.ignore)
    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sleep(heartbeat), touch)))
    return file
  })

/** The servers registered under `servers/` whose file was touched within `freshWithin`. */
export const registered = (
  directory: string,
  freshWithin: Duration.DurationInput
): Effect.Effect<ReadonlyArray<Registration>> =>
  Effect.promise(async () => {
    const dir = NodePath.join(directory, SERVERS)
    const names = await NodeFs.readdir(dir).catch(() => [] as Array<string>)
    const limit = Date.now() - Duration.toMillis(Duration.decode(freshWithin))
    const out: Array<Registration> = []
    for (const name of names.filter((n) => n.endsWith(".json")).sort()) {
      try {
        const path = NodePath.join(dir, name)
        const stat = await NodeFs.stat(path)
        if (stat.mtimeMs < limit) continue
        const entry = JSON.parse(await NodeFs.readFile(path, "utf8")) as Partial<Registration>
        if (typeof entry.url === "string") {
          out.push({ url: entry.url, pid: Number(entry.pid ?? 0), started_at: String(entry.started_at ?? "") })
        }
      } catch {
        // Removed or being replaced as we read: its next heartbeat shows it again.
      }
    }
    return out
  })

/** What a follower holds: the version it loaded last (none yet: the model's own weights) and why the newest failed. */
export interface FollowerState {
  version: number | undefined
  sha256: string | undefined
  error: string | undefined
}

/**
 * One check of the store: loads the newest version when it is not the one held. A version that fails its checks or
 * its load is refused: logged as an error naming it and why (once per distinct problem; the state keeps it for the
 * server's `/v1/models`), and tried again at the next check. A file deleted under the reader because newer versions
 * came meanwhile is not a problem: the newer manifest is read at once.
 */
export const follower = <E>(
  directory: string,
  options: ReadOptions & {
    readonly load: (bytes: Uint8Array, manifest: Manifest) => Effect.Effect<void, E>
    readonly describe: (error: E) => string
  }
) => {
  const state: FollowerState = { version: undefined, sha256: undefined, error: undefined }
  const refuse = (problem: string) =>
    Effect.suspend(() => {
      if (state.error === problem) return Effect.void
      state.error = problem
      return Effect.logError(`weight store: refused (will retry): ${problem}`)
    })
  const check: Effect.Effect<void> = Effect.gen(function*() {
    for (let attempt = 0; attempt < 3; attempt++) {
      const found = yield* Effect.either(latest(directory))
      if (found._tag === "Left") return yield* refuse(found.left.message)
      if (Option.isNone(found.right)) return
      const manifest = found.right.value
      if (manifest.policy_version === state.version && manifest.sha256 === state.sha256) return
      const bytes = yield* Effect.either(read(directory, manifest, options))
      if (bytes._tag === "Left") {
        const now = yield* Effect.option(latest(directory))
        const moved = Option.exists(Option.flatten(now), (m) => m.policy_version !== manifest.policy_version)
        if (moved) continue
        return yield* refuse(bytes.left.message)
      }
      const loaded = yield* Effect.either(options.load(bytes.right, manifest))
      if (loaded._tag === "Left") {
        return yield* refuse(
          `version ${manifest.policy_version} (${manifest.file}) did not load: ${options.describe(loaded.left)}`
        )
      }
      state.version = manifest.policy_version
      state.sha256 = manifest.sha256
      state.error = undefined
      return yield* Effect.logInfo(
        `weight store: loaded version ${manifest.policy_version} (step ${manifest.step}, ${manifest.bytes} bytes)`
      )
    }
  })
  return { state, check }
}

/**
 * Runs `check` until the scope closes: at once when the directory changes (inotify where the file system has it),
 * and every `pollInterval` regardless (network file systems send no change events).
 */
export const watch = (directory: string, check: Effect.Effect<void>, pollInterval: Duration.DurationInput) =>
  Effect.gen(function*() {
    const changed = yield* Effect.acquireRelease(
      Effect.sync(() => {
        let wake: (() => void) | undefined
        let pending = false
        const signal = () => {
          pending = true
          wake?.()
        }
        let watcher: { close: () => void } | undefined
        try {
          watcher = NodeFsSync.watch(directory, signal)
          ;(watcher as NodeFsSync.FSWatcher).on("error", () => undefined)
        } catch {
          watcher = undefined // polling only
        }
        const next = Effect.async<void>((resume) => {
          if (pending) {
            pending = false
            return resume(Effect.void)
          }
          wake = () => {
            wake = undefined
            pending = false
            resume(Effect.void)
          }
          return Effect.sync(() => void (wake = undefined))
        })
        return { next, close: () => watcher?.close() }
      }),
      (w) => Effect.sync(w.close)
    )
    yield* Effect.forkScoped(
      Effect.forever(Effect.zipRight(check, Effect.race(changed.next, Effect.sleep(pollInterval))))
    )
  })
