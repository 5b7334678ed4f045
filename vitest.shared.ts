import { defineConfig } from "vitest/config"

// Shared by every package: tests live in test/**, GPU work on lavapipe is slow, so time limits are generous.
// Tests run the packages from their TypeScript sources: the "@envtrain/source" export condition (see .npmrc and
// docs/architecture.md) comes first, then Vite's own defaults, which a list given here would otherwise replace.
const conditions = (defaults: ReadonlyArray<string>) => ["@envtrain/source", ...defaults]

export default defineConfig({
  resolve: { conditions: conditions(["module", "browser", "development|production"]) },
  ssr: { resolve: { conditions: conditions(["module", "node", "development|production"]) } },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // One Dawn device per worker process is plenty on a 2-core machine.
    pool: "forks",
    fakeTimers: { toFake: [] }
  }
})
