// `npm run pack`: builds the packages (scripts/build.mjs), then `npm pack`s each into build/packs/ and prints the
// tarballs' paths, one a line: what a project outside the repository installs (examples/test/Library.test.ts).
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"

const root = Path.resolve(import.meta.dirname, "..")
const { packages } = await import("./build.mjs")
const out = Path.join(root, "build", "packs")
Fs.rmSync(out, { recursive: true, force: true })
Fs.mkdirSync(out, { recursive: true })
const json = execFileSync(
  "npm",
  ["pack", "--json", "--pack-destination", out, ...packages.map((name) => `--workspace=packages/${name}`)],
  { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }
)
for (const { filename } of JSON.parse(json)) console.log(Path.join(out, filename))
