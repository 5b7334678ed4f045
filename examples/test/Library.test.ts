import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

// envtrain as a library, the way a user gets it: the packages built and packed (`npm run pack`), installed from
// their tarballs into a new project outside the repository (registry packages from the machine's npm
// configuration), the README's "Use it as a library" files type-checked by that project's own strict tsc and run
// with plain node, then the `envtrain` command run from that project. The README is the program's only copy.

const root = Path.resolve(__dirname, "../..")

/** The README section's files: every fenced block with a `title="path"`. */
const readmeFiles = () => {
  const readme = Fs.readFileSync(Path.join(root, "README.md"), "utf8")
  const start = readme.indexOf("\n## Use it as a library\n")
  assert.isAtLeast(start, 0, "README.md has no '## Use it as a library' section")
  const end = readme.indexOf("\n## ", start + 1)
  const section = readme.slice(start, end === -1 ? undefined : end)
  return [...section.matchAll(/```\w+ title="([^"]+)"\n([\s\S]*?)```\n/g)].map(([, file, text]) => ({ file, text }))
}

// What the project's processes inherit from this one, less what ties them to the repository: npm's per-script
// variables (this run's package and its prefix, its `node-options`) and the "@envtrain/source" condition, which
// would send the installed packages to their shipped sources instead of their build.
const userEnv = (): NodeJS.ProcessEnv => {
  const env = { ...process.env }
  for (const key of Object.keys(env)) {
    if (
      key === "INIT_CWD" ||
      /^npm_(package_|lifecycle_|command$|execpath$|node_execpath$|config_node_options$|config_local_prefix$)/
        .test(key)
    ) delete env[key]
  }
  env.NODE_OPTIONS = (env.NODE_OPTIONS ?? "").split(/\s+/).filter((o) => o !== "" && !o.includes("@envtrain/source"))
    .join(" ")
  return env
}

interface Ran {
  readonly stdout: string
  readonly seconds: number
}

/** Runs a command to its end; a non-zero exit fails with the command and its output. */
const run = (command: string, args: ReadonlyArray<string>, cwd: string, env: NodeJS.ProcessEnv = userEnv()) =>
  Effect.async<Ran, Error>((resume) => {
    const started = Date.now()
    const child = spawn(command, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let output = ""
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString()
      output += d.toString()
    })
    child.stderr.on("data", (d: Buffer) => void (output += d.toString()))
    child.on("error", (e) => resume(Effect.fail(e)))
    child.on("close", (code, signal) => {
      const seconds = (Date.now() - started) / 1000
      resume(
        code === 0
          ? Effect.succeed({ stdout, seconds })
          : Effect.fail(
            new Error(
              `\`${[command, ...args].join(" ")}\` in ${cwd} ended with ${code ?? signal}:\n${output.slice(-6000)}`
            )
          )
      )
    })
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

/** `@envtrain/<pkg>` and `@envtrain/<pkg>/<Module>` for every declaration file outside `internal/` folders. */
const publicModules = (project: string) =>
  ["text", "env", "gpu", "rollout", "grpo", "harness"].flatMap((name) => {
    const dist = Path.join(project, "node_modules", "@envtrain", name, "dist")
    const modules = Fs.readdirSync(dist, { recursive: true, encoding: "utf8" })
      .filter((f) => f.endsWith(".d.ts") && !f.split(Path.sep).includes("internal") && f !== "index.d.ts")
      .map((f) => `@envtrain/${name}/${f.slice(0, -".d.ts".length).split(Path.sep).join("/")}`)
    return [`@envtrain/${name}`, ...modules]
  })

const jsonLines = (file: string): Array<Record<string, unknown>> =>
  Fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l))

describe("envtrain as a library", () => {
  it.live(
    "packed, installed in a new project, type-checked by its own strict tsc, trained with plain node and the CLI",
    () =>
      Effect.acquireUseRelease(
        Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "envtrain-library-"))),
        (project) =>
          Effect.gen(function*() {
            assert.isTrue(Path.relative(root, project).startsWith(".."), `${project} is inside the repository`)
            const timings: Array<string> = []
            const timed = (label: string, ran: Ran) => (timings.push(`${label} ${ran.seconds.toFixed(1)} s`), ran)

            const files = readmeFiles()
            assert.deepStrictEqual(files.map((f) => f.file), [
              "package.json",
              "tsconfig.json",
              "src/counter.ts",
              "src/train.ts",
              "envtrain.yaml"
            ])
            for (const { file, text } of files) {
              Fs.mkdirSync(Path.dirname(Path.join(project, file)), { recursive: true })
              Fs.writeFileSync(Path.join(project, file), text)
            }
            const tsconfig = JSON.parse(Fs.readFileSync(Path.join(project, "tsconfig.json"), "utf8"))
            assert.strictEqual(tsconfig.compilerOptions.strict, true)
            assert.strictEqual(tsconfig.compilerOptions.module, "NodeNext")

            const packed = timed("build + pack", yield* run("npm", ["run", "-s", "pack"], root, process.env))
            const tarballs = packed.stdout.split("\n").filter((l) => l.endsWith(".tgz"))
            assert.strictEqual(tarballs.length, 6, packed.stdout)

            const npm = ["--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"]
            timed(
              "npm install",
              yield* run("npm", [
                "install",
                ...npm,
                ...tarballs,
                "effect@3.22.4",
                "@effect/platform@0.97.2",
                "@effect/platform-node@0.108.2"
              ], project)
            )
            timed(
              "npm install -D",
              yield* run("npm", [
                "install",
                "--save-dev",
                ...npm,
                "typescript@5.9.3",
                "@types/node@20.19.43",
                "@types/ws@8.18.1"
              ], project)
            )
            // One copy of effect (the packages take it as a peer), and no tsx: nothing runs TypeScript at run time.
            const effects = (yield* run("npm", ["ls", "effect", "--all", "--parseable"], project)).stdout
              .split("\n").filter((l) => l.endsWith(`${Path.sep}effect`))
            assert.deepStrictEqual([...new Set(effects)], [
              Path.join(Fs.realpathSync(project), "node_modules", "effect")
            ])
            assert.isFalse(Fs.existsSync(Path.join(project, "node_modules", "tsx")), "tsx was installed")

            timed("tsc", yield* run("npx", ["--no", "--", "tsc"], project))
            // Every public module's declarations, as the same strict settings read them (the program above reaches
            // only some): each resolves, and names nothing a user cannot resolve.
            Fs.mkdirSync(Path.join(project, "check"))
            Fs.writeFileSync(
              Path.join(project, "check/all.ts"),
              publicModules(project).map((m, i) => `import * as M${i} from "${m}"\nexport { M${i} }\n`).join("")
            )
            Fs.writeFileSync(
              Path.join(project, "tsconfig.check.json"),
              JSON.stringify({
                extends: "./tsconfig.json",
                compilerOptions: { noEmit: true, rootDir: "." },
                include: ["check"]
              })
            )
            timed("tsc (every module)", yield* run("npx", ["--no", "--", "tsc", "-p", "tsconfig.check.json"], project))

            const trained = timed("node dist/train.js", yield* run(process.execPath, ["dist/train.js"], project))
            assert.match(trained.stdout, /trained 3 steps on \S.*; checkpoint: /)
            const checkpoint = Path.join(project, "runs/counter/checkpoint-3")
            for (const file of ["model.safetensors", "config.json", "tokenizer.json", "trainer_state.json"]) {
              assert.isTrue(Fs.existsSync(Path.join(checkpoint, file)), `${file} is missing in ${checkpoint}`)
            }
            const metrics = jsonLines(Path.join(project, "runs/counter/metrics.jsonl"))
            assert.deepStrictEqual(metrics.map((m) => m.step), [1, 2, 3])
            assert.isTrue("rewards/reached/mean" in metrics[0] && "rewards/progress/mean" in metrics[0])

            const help = timed("envtrain --help", yield* run("npx", ["--no", "--", "envtrain", "--help"], project))
            assert.match(help.stdout, /\btrain\b/)
            timed("envtrain train", yield* run("npx", ["--no", "--", "envtrain", "train", "envtrain.yaml"], project))
            assert.isTrue(Fs.existsSync(Path.join(project, "runs/counter-cli/checkpoint-2/model.safetensors")))
            const cli = jsonLines(Path.join(project, "runs/counter-cli/metrics.jsonl"))
            assert.deepStrictEqual(cli.map((m) => m.step), [1, 2])

            // The TypeScript module itself needs tsx, which this project does not have: the command says so.
            const yaml = Fs.readFileSync(Path.join(project, "envtrain.yaml"), "utf8")
            Fs.writeFileSync(
              Path.join(project, "envtrain-ts.yaml"),
              yaml.replace("./dist/counter.js", "./src/counter.ts")
            )
            const refused = yield* Effect.flip(
              run("npx", ["--no", "--", "envtrain", "train", "envtrain-ts.yaml"], project)
            )
            assert.include(refused.message, "a TypeScript module loads through tsx, which is not installed here")
            console.log(`library test: ${timings.join(", ")}`)
          }),
        (project) => Effect.sync(() => Fs.rmSync(project, { recursive: true, force: true }))
      ),
    300_000
  )
})
