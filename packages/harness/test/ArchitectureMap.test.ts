import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

// docs/architecture.md's "Where each concept lives" is the map of the code; this keeps it true. Under each
// `**`packages/<name>`**` heading, every backticked `….ts` path is read relative to that package's `src/`: it
// must exist, and every public module (a file outside `internal/` folders, `index.ts` aside) must be named. A path
// that starts with `packages/` names another package's file and is read from the repository root.
const root = fileURLToPath(new URL("../../..", import.meta.url))
const doc = Fs.readFileSync(Path.join(root, "docs", "architecture.md"), "utf8")
const section = doc.split("## Where each concept lives")[1]?.split("\n## ")[0] ?? ""

const mapped = (): Map<string, Set<string>> => {
  const parts = section.split(/\*\*`packages\/([\w-]+)`\*\*/)
  const byPackage = new Map<string, Set<string>>()
  for (let i = 1; i < parts.length; i += 2) {
    byPackage.set(parts[i], new Set(Array.from(parts[i + 1].matchAll(/`([\w/.-]+\.ts)`/g), (m) => m[1])))
  }
  return byPackage
}

const sources = (name: string): Array<string> =>
  Fs.readdirSync(Path.join(root, "packages", name, "src"), { recursive: true, encoding: "utf8" })
    .map((file) => file.split(Path.sep).join("/"))
    .filter((file) => file.endsWith(".ts"))

describe("docs/architecture.md", () => {
  const packages = Fs.readdirSync(Path.join(root, "packages")).filter((name) =>
    Fs.existsSync(Path.join(root, "packages", name, "src"))
  )

  it("has a map section for every package", () => {
    assert.deepStrictEqual([...mapped().keys()].sort(), [...packages].sort())
  })

  it.each(packages)("names every public module of packages/%s and only files that exist", (name) => {
    const named = mapped().get(name) ?? new Set<string>()
    const files = sources(name)
    const missing = files.filter((file) =>
      file !== "index.ts" && !file.split("/").includes("internal") && !named.has(file)
    )
    const stale = [...named].filter((file) =>
      file.startsWith("packages/") ? !Fs.existsSync(Path.join(root, file)) : !files.includes(file)
    )
    assert.deepStrictEqual(
      { missing, stale },
      { missing: [], stale: [] },
      `packages/${name}: name the missing modules in the map, drop or fix the stale paths (relative to src/)`
    )
  })
})
