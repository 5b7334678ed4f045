// `npm run build`: every published package's src/ to dist/ (ESM JavaScript, declarations, source maps) with
// `tsc -b tsconfig.build.json`, then the files a module reads beside itself at run time (anything in src/ that is
// not TypeScript, such as WebAssembly) copied to the same place under dist/. `.mjs` files in src/ are left out:
// they are source-only entries that register tsx (the build runs the compiled module itself).
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"

const root = Path.resolve(import.meta.dirname, "..")
export const packages = ["text", "env", "gpu", "rollout", "grpo", "harness"]

const tsc = Path.join(root, "node_modules", "typescript", "bin", "tsc")
execFileSync(process.execPath, [tsc, "-b", Path.join(root, "tsconfig.build.json")], { stdio: "inherit" })

let copied = 0
for (const name of packages) {
  const src = Path.join(root, "packages", name, "src")
  for (const entry of Fs.readdirSync(src, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || /\.(ts|mjs)$/.test(entry.name)) continue
    const from = Path.join(entry.parentPath, entry.name)
    const to = Path.join(root, "packages", name, "dist", Path.relative(src, from))
    Fs.mkdirSync(Path.dirname(to), { recursive: true })
    Fs.copyFileSync(from, to)
    copied += 1
  }
}
console.log(
  `build: ${packages.length} packages in packages/*/dist${copied > 0 ? ` (${copied} asset files copied)` : ""}`
)
