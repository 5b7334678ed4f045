import { assert, describe, it } from "@effect/vitest"
import { ESLint } from "eslint"
import { fileURLToPath } from "node:url"

// The repository's own eslint.config.mjs, run through ESLint's Node API on made-up files: the rule table
// there is what `npm run lint` enforces, so this checks the real configuration, not a copy.
const root = fileURLToPath(new URL("../../..", import.meta.url))

const direction = async (filePath: string, code: string) => {
  const [result] = await new ESLint({ cwd: root }).lintText(code, { filePath })
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
}, 60_000)
