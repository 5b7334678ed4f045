import { defineConfig } from "vitest/config"

// Shared by every package: tests live in test/**, GPU work on lavapipe is slow, so time limits are generous.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // One Dawn device per worker process is plenty on a 2-core machine.
    pool: "forks",
    fakeTimers: { toFake: [] }
  }
})
