import { fileURLToPath } from "node:url"
import { defineProject, mergeConfig } from "vitest/config"
import shared from "../vitest.shared.js"

// Not in vitest.workspace.ts: `npm test` does not run it; `npm run test:interop` does (it needs .venv).
// Test files are looked for here, so `npx vitest run --config interop/vitest.config.ts` from the repository root
// finds interop/test (the root, and so the report's path, stays the working directory).
export default mergeConfig(
  shared,
  defineProject({ test: { name: "interop", dir: fileURLToPath(new URL(".", import.meta.url)) } })
)
