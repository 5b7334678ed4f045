import { defineProject, mergeConfig } from "vitest/config"
import shared from "../vitest.shared.js"

// Not in vitest.workspace.ts: `npm test` does not run it; `npm run test:interop` does (it needs .venv).
export default mergeConfig(shared, defineProject({ test: { name: "interop" } }))
