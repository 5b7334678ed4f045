// Lint + format in one pass: typescript-eslint for correctness, the Effect repo's dprint rule for formatting.
import effect from "@effect/eslint-plugin"
import js from "@eslint/js"
import tseslint from "typescript-eslint"
import dependencyDirection from "./eslint/dependencyDirection.mjs"

// The dependency direction (docs/architecture.md, "Dependency direction"): who may import whom.
// Names are the workspace packages and where they live. A package's entry lists its own folder first
// (`@envtrain/<name>` resolves there); further entries are places that count as that package too.
export const packages = {
  env: ["packages/env"],
  text: ["packages/text"],
  gpu: ["packages/gpu"],
  rollout: ["packages/rollout"],
  grpo: ["packages/grpo"],
  harness: ["packages/harness"],
  examples: ["examples"],
  interop: ["interop"],
  bench: ["bench"]
}
const libraries = ["env", "text", "gpu", "rollout", "grpo", "harness"]

// Who may import whom. A key is a folder or a file (relative to the repository root); the most specific
// key containing a file governs it. A file may import anything inside its own key, plus what the key
// lists (package names or folders/files). Nothing outside the packages (examples, interop, bench) is listed
// by a package, so no package can import them; `@envtrain/<pkg>/internal/...` is refused everywhere.
export const direction = {
  // Leaves: env and gpu know nothing of each other; text knows none of ours.
  "packages/env": [],
  "packages/text": [],
  "packages/gpu": ["text"],
  // Inside gpu, by concern (docs/architecture.md, "gpu: folders, ops and CPU specifications"): the device and memory
  // (runtime) below the ops; a program compiles an op list, so it may name the op vocabulary and its lowering; the
  // model is built from all three; formats read and write checkpoints (a random one from a model preset).
  "packages/gpu/src/runtime": ["packages/gpu/src/ops/Ops.ts", "packages/gpu/src/ops/Lowering.ts"],
  "packages/gpu/src/ops": ["packages/gpu/src/runtime"],
  "packages/gpu/src/formats": ["text", "packages/gpu/src/model/Preset.ts"],
  "packages/gpu/src/model": [
    "text",
    "packages/gpu/src/runtime",
    "packages/gpu/src/ops",
    "packages/gpu/src/formats",
    "packages/gpu/src/Matmul.ts"
  ],
  "packages/rollout": ["env", "text"],
  // The local policy is rollout's one door to the GPU; the tests drive it with a real tiny model.
  "packages/rollout/src/LocalPolicy.ts": ["rollout", "env", "text", "gpu"],
  "packages/rollout/test": ["rollout", "env", "text", "gpu"],
  "packages/grpo": ["rollout", "env", "gpu", "text"],
  "packages/harness": ["grpo", "rollout", "env", "gpu", "text"],
  "examples": libraries,
  "interop": libraries,
  // Benchmarks measure the libraries and the examples' pipelines.
  "bench": [...libraries, "examples"]
}

export default tseslint.config(
  {
    ignores: [
      "**/node_modules/**",
      "**/build/**",
      "**/dist/**",
      "runs/**",
      "bench/results/**",
      ".device/**",
      ".venv/**"
    ]
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  ...effect.configs.dprint,
  {
    languageOptions: { globals: { console: "readonly", process: "readonly" } },
    rules: {
      "@effect/dprint": ["error", {
        config: {
          indentWidth: 2,
          lineWidth: 120,
          semiColons: "asi",
          quoteStyle: "alwaysDouble",
          trailingCommas: "never",
          operatorPosition: "maintain",
          "arrowFunction.useParentheses": "force"
        }
      }],
      "@typescript-eslint/array-type": ["error", { default: "generic", readonly: "generic" }],
      "@typescript-eslint/consistent-type-imports": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-namespace": "off",
      "no-constant-condition": ["error", { checkLoops: false }]
    }
  },
  {
    files: ["**/*.ts", "**/*.mts", "**/*.mjs"],
    plugins: { envtrain: { rules: { "dependency-direction": dependencyDirection } } },
    rules: {
      "envtrain/dependency-direction": ["error", { root: import.meta.dirname, packages, rules: direction }]
    }
  },
  {
    files: ["**/*.mjs"],
    rules: { "@typescript-eslint/consistent-type-imports": "off" }
  }
)
