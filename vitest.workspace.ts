// One vitest project per package; `npm test` runs them all.
export default [
  "packages/text",
  "packages/env",
  "packages/gpu",
  "packages/rollout",
  "packages/grpo",
  "packages/harness",
  "examples"
]
