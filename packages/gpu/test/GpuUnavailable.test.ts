import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { Gpu } from "../src/runtime/Gpu.js"

const script = fileURLToPath(new URL("../../../scripts/ensure-vulkan.sh", import.meta.url))

describe("Gpu without a usable adapter", () => {
  it.effect("fails with GpuUnavailable whose message carries the fix, and names no mirror", () =>
    Effect.gen(function*() {
      // Asking Dawn for an adapter that does not exist is what a machine without a driver looks like to us.
      const error = yield* Effect.flip(
        Effect.scoped(Effect.provide(Gpu, Gpu.layer({ dawnOptions: ["adapter=no-such-adapter"] })))
      )
      assert.strictEqual(error._tag, "GpuUnavailable")
      assert.include(error.message, "No WebGPU adapter is available")
      assert.include(error.message, "sudo bash scripts/ensure-vulkan.sh")
      assert.include(error.message, "bash scripts/ensure-vulkan.sh --backports-line")
      assert.include(error.message, "apt-get install -y -t bookworm-backports mesa-vulkan-drivers")
      // The mirror comes from the machine's own sources: the message writes no host.
      assert.notMatch(error.message, /[a-z]+:\/\//)
      assert.isTrue(fs.existsSync(script), `${script} exists (the message points at it)`)
    }))
})

/** `ensure-vulkan.sh --backports-line` on a made-up /etc/apt (ENVTRAIN_APT_ETC). */
const backportsLine = (files: Readonly<Record<string, string>>) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "apt-"))
  try {
    fs.mkdirSync(path.join(dir, "sources.list.d"))
    for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text)
    try {
      const out = execFileSync("bash", [script, "--backports-line"], {
        env: { ...process.env, ENVTRAIN_APT_ETC: dir },
        stdio: ["ignore", "pipe", "pipe"]
      })
      return { ok: true as const, line: out.toString().trim() }
    } catch (e) {
      return { ok: false as const, stderr: String((e as { stderr?: Buffer }).stderr ?? "") }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

describe("ensure-vulkan.sh: bookworm-backports from the configured Debian source", () => {
  it("one-line sources.list: the bookworm main entry's URI and options (comments, deb-src and other suites skipped)", () => {
    const r = backportsLine({
      "sources.list": [
        "# deb http://commented.example/debian bookworm main",
        "deb-src http://source.example/debian bookworm main",
        "deb http://updates.example/debian bookworm-updates main",
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror-a.example/debian bookworm contrib main",
        ""
      ].join("\n")
    })
    assert.deepStrictEqual(r, {
      ok: true,
      line: "deb [arch=amd64 signed-by=/k.gpg] http://mirror-a.example/debian bookworm-backports main"
    })
  })

  it("deb822 *.sources: the first enabled stanza with bookworm and main, its first URI and Signed-By", () => {
    const r = backportsLine({
      "sources.list.d/debian.sources": [
        "Types: deb",
        "URIs: http://disabled.example/debian",
        "Suites: bookworm",
        "Components: main",
        "Enabled: no",
        "",
        "Types: deb",
        "# a comment inside the stanza",
        "URIs: http://mirror-b.example/debian http://mirror-c.example/debian",
        "Suites: bookworm bookworm-updates",
        "Components: main",
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg",
        "",
        "Types: deb",
        "URIs: http://security.example/debian-security",
        "Suites: bookworm-security",
        "Components: main",
        ""
      ].join("\n")
    })
    assert.deepStrictEqual(r, {
      ok: true,
      line: "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror-b.example/debian " +
        "bookworm-backports main"
    })
  })

  it("no bookworm main source: fails, saying what is missing and what to add", () => {
    const r = backportsLine({
      "sources.list": "deb http://other.example/ubuntu jammy main\n",
      "sources.list.d/src.sources":
        "Types: deb-src\nURIs: http://source.example/debian\nSuites: bookworm\nComponents: main\n"
    })
    assert.isFalse(r.ok)
    if (!r.ok) {
      assert.include(r.stderr, "no enabled 'deb' entry for the suite bookworm with the component main")
      assert.include(r.stderr, "bookworm-backports main")
    }
  })
})
