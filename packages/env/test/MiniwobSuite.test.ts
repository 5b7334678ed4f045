import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { BrowserGym, Registry } from "../src/index.js"
import * as Suite from "../src/internal/miniwobSuite.js"

// The real suite is played in interop (where the `miniwob` package is installed); here: finding its pages, and the
// error that names the fix when they are not there. MINIWOB_HTML_DIR is pinned to a missing folder for the whole
// file, so a project .venv that does have the package cannot make these tests pass or fail by accident.
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "envtrain-miniwob-"))
const missing = path.join(tmp, "no-such-folder")
const saved = process.env.MINIWOB_HTML_DIR
process.env.MINIWOB_HTML_DIR = missing
afterAll(() => {
  if (saved === undefined) delete process.env.MINIWOB_HTML_DIR
  else process.env.MINIWOB_HTML_DIR = saved
  fs.rmSync(tmp, { recursive: true, force: true })
})

/** A folder laid out as the package installs itself in a virtual environment (only the parts the lookup reads). */
const fakeVenvProject = () => {
  const project = fs.mkdtempSync(path.join(tmp, "project-"))
  const html = path.join(project, ".venv", "lib", "python3.12", "site-packages", "miniwob", "html")
  fs.mkdirSync(path.join(html, "miniwob"), { recursive: true })
  fs.mkdirSync(path.join(html, "core"), { recursive: true })
  fs.writeFileSync(path.join(html, "miniwob", "click-test.html"), "<html></html>")
  fs.writeFileSync(path.join(html, "miniwob", "click-button.html"), "<html></html>")
  return { project, html }
}

describe("the real MiniWoB++ suite: where its pages are, and the error when they are not", () => {
  it("without MINIWOB_HTML_DIR and without a .venv holding the package, the message names both fixes", () => {
    const empty = fs.mkdtempSync(path.join(tmp, "empty-"))
    const found = Suite.locate({}, empty)
    assert.isFalse(found.ok)
    if (!found.ok) {
      assert.include(found.message, "pip install miniwob")
      assert.include(found.message, "MINIWOB_HTML_DIR")
    }
  })

  it("the package in a .venv of the working folder or a folder above it is found; its pages are the task names", () => {
    const { html, project } = fakeVenvProject()
    const below = path.join(project, "packages", "env")
    fs.mkdirSync(below, { recursive: true })
    const found = Suite.locate({}, below)
    assert.deepStrictEqual(found, { ok: true, dir: html })
    assert.deepStrictEqual(Suite.suiteTasks(html), ["miniwob.click-button", "miniwob.click-test"])
    // MINIWOB_HTML_DIR wins over the .venv, and a wrong one is an error, not a fallback.
    const wrong = Suite.locate({ MINIWOB_HTML_DIR: missing }, below)
    assert.isFalse(wrong.ok)
    if (!wrong.ok) assert.include(wrong.message, `MINIWOB_HTML_DIR=${missing} is not the miniwob package's html folder`)
    assert.deepStrictEqual(Suite.locate({ MINIWOB_HTML_DIR: html }, tmp), { ok: true, dir: html })
    const absent = Suite.resolve("miniwob.fly", { MINIWOB_HTML_DIR: html }, tmp)
    assert.isFalse(absent.ok)
    if (!absent.ok) assert.include(absent.message, "has no fly.html")
  })

  it("checkTask: envtrain's tasks play without the package; miniwob.* names the fix", () => {
    assert.isTrue(BrowserGym.isTask("click-test"))
    assert.isFalse(BrowserGym.isTask("miniwob.click-test"))
    const check = BrowserGym.checkTask("miniwob.click-test")
    assert.isFalse(check.ok)
    if (!check.ok) assert.match(check.message, /^cannot play 'miniwob\.click-test': MINIWOB_HTML_DIR=/)
    const suite = BrowserGym.suiteTasks()
    assert.isFalse(suite.ok)
  })

  it.effect("a reset to miniwob.click-test fails with the fix in the message; the session stays usable", () =>
    Effect.scoped(Effect.gen(function*() {
      const instance = yield* BrowserGym.openEnvFor({}).make
      const error = yield* Effect.flip(instance.reset({ seed: 1, task_name: "miniwob.click-test" }))
      assert.strictEqual(error._tag, "OpenEnvExecutionError")
      assert.include(error.message, "cannot play 'miniwob.click-test'")
      assert.include(error.message, "MINIWOB_HTML_DIR")
      // Nothing was started: no step counted, the default task still in place.
      const state = yield* instance.state
      assert.strictEqual(state.step_count, 0)
      assert.strictEqual(state.task_name, "click-test")
    })))

  it.effect("`envtrain serve browsergym --task miniwob.click-test` is refused before serving, naming the fix", () =>
    Effect.gen(function*() {
      const refused = yield* Effect.flip(
        Effect.scoped(Registry.serve("browsergym", { port: 0 }, { task: "miniwob.click-test" }))
      )
      assert.include(refused.message, "environment 'browsergym': cannot play 'miniwob.click-test'")
      assert.include(refused.message, "MINIWOB_HTML_DIR")
      const installedNothing = Suite.locate({}, tmp)
      assert.isFalse(installedNothing.ok)
      if (!installedNothing.ok) assert.include(installedNothing.message, "`pip install miniwob`")
    }))
})
