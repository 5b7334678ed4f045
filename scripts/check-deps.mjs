// Fails when more than one copy of `effect` is installed: two copies break Context tags and
// instanceof checks in ways that are very hard to debug.
import { execFileSync } from "node:child_process"

const out = execFileSync("npm", ["ls", "effect", "--all", "--json"], { encoding: "utf8" })
const versions = new Map()
const walk = (node, path) => {
  for (const [name, dep] of Object.entries(node.dependencies ?? {})) {
    const here = [...path, `${name}@${dep.version}`]
    if (name === "effect") versions.set(dep.version, [...(versions.get(dep.version) ?? []), here.join(" > ")])
    walk(dep, here)
  }
}
walk(JSON.parse(out), [])
if (versions.size !== 1) {
  console.error(`envtrain: expected exactly one copy of effect, found ${versions.size}:`)
  for (const [v, paths] of versions) console.error(`  effect@${v}\n    ${paths.slice(0, 5).join("\n    ")}`)
  console.error("Fix: pin every package to the same effect 3.22.x version in its package.json, then run `npm install`.")
  process.exit(1)
}
const [[version]] = versions
if (!version.startsWith("3.")) {
  console.error(`envtrain: effect@${version} is installed, but envtrain is written for the Effect 3.x line (3.22).`)
  process.exit(1)
}
console.log(`check:deps: one copy of effect (${version})`)
