import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"

// Every `@example` block in the doc comments, compiled: an example that imports a module or a member that does
// not exist, or calls one with the wrong arguments, fails here, naming the source file and line. The blocks are
// found by glob, so files moving between packages and folders need no change here.
//
// Examples are short, so each is compiled as a module with three allowances: (1) a top-level `yield*` runs
// inside `Effect.gen`; (2) a namespace it uses without importing it (`Qwen3Reference.forward(...)` in
// Qwen3Reference.ts) is imported from the package index that exports it, the documented file's own package
// first, then `effect`; (3) any other free name (`model`, `rows`: what the reader brings) is declared `any`.
// Unused names and untyped parameters are allowed. Everything else is checked with the repository's strict settings.
const root = fileURLToPath(new URL("../../..", import.meta.url))
const outDir = Path.join(root, "build", "examples-check")
const documented = [/^packages\/[^/]+\/src\/.*\.ts$/, /^examples\/src\/.*\.ts$/, /^interop\/src\/.*\.ts$/]

interface Example {
  readonly source: string // repository-relative path of the documented file
  readonly line: number // 1-based line of the example's first code line in that file
  readonly code: string
}

const sourceFiles = (): Array<string> =>
  ["packages", "examples", "interop"].flatMap((top) =>
    Fs.readdirSync(Path.join(root, top), { recursive: true, encoding: "utf8" })
      .map((file) => `${top}/${file.split(Path.sep).join("/")}`)
      .filter((file) => documented.some((pattern) => pattern.test(file)) && !file.endsWith(".d.ts"))
  ).sort()

// A doc comment's `@example` is followed by a ```ts fence; its lines lose the comment's leading ` * `.
const examplesIn = (source: string): Array<Example> => {
  const lines = Fs.readFileSync(Path.join(root, source), "utf8").split("\n")
  const examples: Array<Example> = []
  let inDoc = false
  let afterTag = false
  let code: Array<string> | undefined = undefined
  let start = 0
  lines.forEach((text, index) => {
    if (!inDoc) {
      inDoc = /^\s*\/\*\*/.test(text) && !/\*\/\s*$/.test(text)
      afterTag = false
      return
    }
    if (/\*\/\s*$/.test(text)) {
      inDoc = false
      return
    }
    const body = text.replace(/^\s*\* ?/, "")
    if (code !== undefined) {
      if (/^```\s*$/.test(body)) {
        examples.push({ source, line: start, code: code.join("\n") })
        code = undefined
      } else {
        code.push(body)
      }
    } else if (/^@example\b/.test(body)) {
      afterTag = true
    } else if (afterTag && /^```(ts|typescript)\s*$/.test(body)) {
      code = []
      start = index + 2
      afterTag = false
    }
  })
  return examples
}

// Namespaces each package index exports (`export * as Tool from "./Tool.js"`), by package name.
const packageNamespaces = (): Map<string, Set<string>> => {
  const byPackage = new Map<string, Set<string>>()
  for (const dir of Fs.readdirSync(Path.join(root, "packages"))) {
    const index = Path.join(root, "packages", dir, "src", "index.ts")
    if (!Fs.existsSync(index)) continue
    const manifest = JSON.parse(Fs.readFileSync(Path.join(root, "packages", dir, "package.json"), "utf8"))
    const names = [...Fs.readFileSync(index, "utf8").matchAll(/export \* as (\w+) from/g)].map((m) => m[1])
    byPackage.set(manifest.name, new Set(names))
  }
  return byPackage
}

const packageOf = (source: string): string | undefined => {
  const dir = /^packages\/([^/]+)\//.exec(source)?.[1]
  if (dir === undefined) return undefined
  return JSON.parse(Fs.readFileSync(Path.join(root, "packages", dir, "package.json"), "utf8")).name
}

interface Generated {
  readonly example: Example
  readonly file: string
  readonly prelude: Array<string> // lines put before the example's code, so diagnostics shift by its length
  readonly body: string
}

// The example's imports stay at the top; the rest runs inside `Effect.gen` when it yields at top level.
const generate = (example: Example, prelude: Array<string>): Generated => {
  const name = `${example.source.replace(/\//g, "_").replace(/\.ts$/, "")}_L${example.line}.ts`
  const file = Path.join(outDir, name)
  // A relative import means what it means beside the documented file.
  const code = example.code.replace(/(from\s+")(\.\.?\/[^"]+)"/g, (_, from: string, spec: string) => {
    const target = Path.resolve(root, Path.dirname(example.source), spec)
    const relative = Path.relative(outDir, target).split(Path.sep).join("/")
    return `${from}${relative.startsWith(".") ? relative : `./${relative}`}"`
  })
  const yields = /\byield\*/.test(code) && !/function\s*\*/.test(code)
  const body = yields ? wrapInGen(code) : code
  return { example, file, prelude, body }
}

const wrapInGen = (code: string): string => {
  const parsed = ts.createSourceFile("x.ts", code, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS)
  const imports = parsed.statements.filter(ts.isImportDeclaration)
  const end = imports.length === 0 ? 0 : imports[imports.length - 1].end
  // Same line count: the wrapper opens on the imports' last line and closes after the code.
  return `${code.slice(0, end)}; export const example = Effect.gen(function*() {${code.slice(end)}\n})`
}

const write = (generated: Generated) =>
  Fs.writeFileSync(
    generated.file,
    `${
      [`// ${generated.example.source}:${generated.example.line}`, ...generated.prelude].join("\n")
    }\n${generated.body}\n` +
      "export {}\n"
  )

const options: ts.CompilerOptions = {
  target: ts.ScriptTarget.ES2022,
  lib: ["lib.es2023.d.ts"],
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  strict: true,
  // A snippet's callback parameters are often left to inference from a placeholder.
  noImplicitAny: false,
  exactOptionalPropertyTypes: true,
  noImplicitOverride: true,
  verbatimModuleSyntax: true,
  isolatedModules: true,
  skipLibCheck: true,
  resolveJsonModule: true,
  noEmit: true,
  types: ["node", "@webgpu/types"],
  // The packages' sources, as the repository's tsconfig.base.json resolves them (no build needed).
  customConditions: ["@envtrain/source"]
}

const cannotFindName = new Set([2304, 2552, 18004, 2663])

const diagnosticsOf = (program: ts.Program, file: string) => {
  const sourceFile = program.getSourceFile(file)
  if (sourceFile === undefined) return { sourceFile, diagnostics: [] }
  const diagnostics = [...program.getSyntacticDiagnostics(sourceFile), ...program.getSemanticDiagnostics(sourceFile)]
  return { sourceFile, diagnostics }
}

describe("@example blocks in doc comments", () => {
  it("type-check", async () => {
    const examples = sourceFiles().flatMap(examplesIn)
    assert.isAbove(examples.length, 50, "the extractor found suspiciously few examples")
    Fs.rmSync(outDir, { recursive: true, force: true })
    Fs.mkdirSync(outDir, { recursive: true })

    // First pass: as written, to learn each example's free names.
    const first = examples.map((example) => generate(example, []))
    first.forEach(write)
    const program = ts.createProgram(first.map((g) => g.file), options)

    const namespaces = packageNamespaces()
    const effectExports = new Set(Object.keys(await import("effect")))
    const second = first.map((generated) => {
      const { diagnostics, sourceFile } = diagnosticsOf(program, generated.file)
      const free = new Set(
        diagnostics.filter((d) => cannotFindName.has(d.code) && d.start !== undefined && sourceFile !== undefined)
          .map((d) => sourceFile!.text.slice(d.start, d.start! + d.length!))
      )
      const own = packageOf(generated.example.source)
      const order = [...(own === undefined ? [] : [own]), ...[...namespaces.keys()].filter((p) => p !== own)]
      const prelude = [...free].sort().map((name) => {
        const from = order.find((pkg) => namespaces.get(pkg)!.has(name))
        if (from !== undefined) return `import { ${name} } from "${from}"`
        if (effectExports.has(name)) return `import { ${name} } from "effect"`
        return `declare const ${name}: any`
      })
      return generate(generated.example, prelude)
    })
    second.forEach(write)
    const checked = ts.createProgram(second.map((g) => g.file), options, undefined, program)

    const failures = second.flatMap((generated) => {
      const { example } = generated
      const { diagnostics, sourceFile } = diagnosticsOf(checked, generated.file)
      if (sourceFile === undefined) return [`${example.source}:${example.line}: not compiled`]
      return diagnostics.map((diagnostic) => {
        const line = diagnostic.start === undefined
          ? 0
          : sourceFile.getLineAndCharacterOfPosition(diagnostic.start).line
        const at = Math.max(0, line - 1 - generated.prelude.length)
        const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n  ")
        return `${example.source}:${example.line + at}: TS${diagnostic.code}: ${message}`
      })
    })
    assert.deepStrictEqual(failures, [], `\n${failures.join("\n")}\n(generated files in ${outDir})`)
  }, 300_000)
})
