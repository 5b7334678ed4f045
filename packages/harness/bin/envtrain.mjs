#!/usr/bin/env node
// The envtrain command. Installed from npm it is the built JavaScript (dist/bin.js), plain node. In the repository,
// where npm scripts and npx give node the "@envtrain/source" export condition (.npmrc) so that every @envtrain
// package resolves to its TypeScript sources, it runs src/bin.ts under tsx the same way: the build is never mixed
// with the sources. `npm run build` makes dist/.
import { existsSync } from "node:fs"
import { fileURLToPath, URL } from "node:url"

const fromSources = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? "").split(/\s+/)]
  .some((option) => option.endsWith("@envtrain/source"))

if (fromSources) {
  const { register } = await import("tsx/esm/api")
  register()
  await import(new URL("../src/bin.ts", import.meta.url).href)
} else {
  const built = new URL("../dist/bin.js", import.meta.url)
  if (!existsSync(built)) {
    console.error(
      `envtrain: ${fileURLToPath(built)} is missing: this package is not built. ` +
        "In the repository, run `npm run build` first, or `npm run envtrain -- <command>` to run the sources."
    )
    process.exit(1)
  }
  await import(built.href)
}
