import { assert, describe, it } from "@effect/vitest"
import { ESLint } from "eslint"
import { fileURLToPath, pathToFileURL } from "node:url"

// The repository's own eslint.config.mjs, run through ESLint's Node API on made-up files: the rule table
// there is what `npm run lint` enforces, so this checks the real configuration, not a copy.
const root = fileURLToPath(new URL("../../..", import.meta.url))

const direction = async (filePath: string, code: string, overrideConfig?: ESLint.Options["overrideConfig"]) => {
  const eslint = new ESLint(overrideConfig === undefined ? { cwd: root } : { cwd: root, overrideConfig })
  const [result] = await eslint.lintText(code, { filePath })
  return result.messages.filter((message) => message.ruleId === "envtrain/dependency-direction")
}

describe("dependency direction (eslint.config.mjs)", () => {
  it("refuses a wrong-direction import: env may not know grpo", async () => {
    const errors = await direction(
      "packages/env/src/WrongWay.ts",
      "import * as Trainer from \"@envtrain/grpo/Trainer\"\nexport const trainer = Trainer\n"
    )
    assert.strictEqual(errors.length, 1)
    assert.strictEqual(errors[0].severity, 2)
    assert.match(errors[0].message, /packages\/env may not import packages\/grpo\/src\/Trainer/)
  })

  it("refuses a relative path into another package and a reach into internals", async () => {
    const relative = await direction(
      "packages/rollout/src/WrongWay.ts",
      "import * as Gpu from \"../../gpu/src/Gpu.js\"\nexport const gpu = Gpu\n"
    )
    assert.strictEqual(relative.length, 1)
    const internal = await direction(
      "packages/grpo/src/WrongWay.ts",
      "import * as client from \"@envtrain/env/internal/client\"\nexport const c = client\n"
    )
    assert.strictEqual(internal.length, 1)
    assert.match(internal[0].message, /internals/)
  })

  it("allows an import along the direction: grpo may use rollout and env", async () => {
    const errors = await direction(
      "packages/grpo/src/RightWay.ts",
      "import * as Episode from \"@envtrain/rollout/Episode\"\nimport * as Environment from \"@envtrain/env/Environment\"\n" +
        "export const both = [Episode, Environment]\n"
    )
    assert.deepStrictEqual(errors, [])
  })

  it("applies a folder rule inside a package: the most specific key governs", async () => {
    const config = await import(pathToFileURL(`${root}eslint.config.mjs`).href) as {
      readonly packages: Record<string, ReadonlyArray<string>>
      readonly direction: Record<string, ReadonlyArray<string>>
    }
    const rules = { ...config.direction, "packages/gpu/src/ops": ["packages/gpu/src/runtime"] }
    const overrideConfig: ESLint.Options["overrideConfig"] = {
      files: ["**/*.ts"],
      rules: { "envtrain/dependency-direction": ["error", { root, packages: config.packages, rules }] }
    }
    const upward = await direction(
      "packages/gpu/src/ops/Matmul.ts",
      "import * as Qwen3 from \"../model/Qwen3.js\"\nexport const q = Qwen3\n",
      overrideConfig
    )
    assert.strictEqual(upward.length, 1)
    assert.match(upward[0].message, /packages\/gpu\/src\/ops may not import packages\/gpu\/src\/model\/Qwen3/)
    const downward = await direction(
      "packages/gpu/src/ops/Matmul.ts",
      "import * as Device from \"../runtime/Device.js\"\nimport * as Rms from \"./RmsNorm.js\"\n" +
        "export const d = [Device, Rms]\n",
      overrideConfig
    )
    assert.deepStrictEqual(downward, [])
  })
}, 60_000)
