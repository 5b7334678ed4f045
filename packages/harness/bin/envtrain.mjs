#!/usr/bin/env node
// The envtrain command, as installed from npm: the built JavaScript, plain node. In the repository the packages run
// from their TypeScript sources: `npm run envtrain -- …` runs src/bin.ts under tsx, and `npm run build` makes dist/.
import { existsSync } from "node:fs"
import { fileURLToPath, URL } from "node:url"

const built = new URL("../dist/bin.js", import.meta.url)
if (!existsSync(built)) {
  console.error(
    `envtrain: ${fileURLToPath(built)} is missing: this package is not built. ` +
      "In the repository, run `npm run build` first, or `npm run envtrain -- <command>` to run the sources."
  )
  process.exit(1)
}
await import(built.href)
