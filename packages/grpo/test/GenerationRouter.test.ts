// The generation router (which policy server a request goes to), on plain records with a controlled clock: an
// episode's turns stay on one server, new episodes go to the least-loaded one, a server that leaves the usable set
// loses its episodes to the others, idle episodes are forgotten.
import { assert, describe, it } from "@effect/vitest"
import * as GenerationRouter from "../src/internal/generationRouter.js"

interface FakeServer {
  readonly name: string
  inFlight: number
}

const setup = () => {
  let now = 0
  const router = GenerationRouter.make<FakeServer>(60_000, () => now)
  const a: FakeServer = { name: "a", inFlight: 0 }
  const b: FakeServer = { name: "b", inFlight: 0 }
  const c: FakeServer = { name: "c", inFlight: 0 }
  return { router, a, b, c, advance: (ms: number) => void (now += ms) }
}

describe("GenerationRouter", () => {
  it("keeps every turn of an episode on its first server; spreads new episodes by active episodes", () => {
    const { a, b, c, router } = setup()
    const all = [a, b, c]
    const first = ["e1", "e2", "e3", "e4", "e5", "e6"].map((e) => router.choose(all, e).name)
    // Six new episodes over three idle servers: two each.
    assert.deepStrictEqual([...first].sort(), ["a", "a", "b", "b", "c", "c"])
    for (let turn = 0; turn < 4; turn++) {
      // Later turns go where the first did, however loaded that server is meanwhile.
      a.inFlight = 10
      assert.deepStrictEqual(["e1", "e2", "e3", "e4", "e5", "e6"].map((e) => router.choose(all, e).name), first)
    }
    assert.deepStrictEqual(all.map((s) => router.episodesOn(s)), [2, 2, 2])
  })

  it("without an episode, or on a tie in episodes, the fewest requests in flight wins", () => {
    const { a, b, c, router } = setup()
    a.inFlight = 3
    b.inFlight = 1
    c.inFlight = 2
    assert.strictEqual(router.choose([a, b, c], undefined).name, "b")
    assert.strictEqual(router.choose([a, b, c], "x").name, "b")
    // b now holds an episode: the next new one goes to the least busy of the others.
    assert.strictEqual(router.choose([a, b, c], "y").name, "c")
  })

  it("an episode whose server is no longer usable moves to the least-loaded usable one, and stays there", () => {
    const { a, b, c, router } = setup()
    const first = router.choose([a, b, c], "e1")
    const second = router.choose([a, b, c], "e2")
    assert.notStrictEqual(second, first)
    // e1's server went down (or fell behind the current weights): e1 moves to the one holding no episode, and its
    // count goes with it.
    const third = [a, b, c].find((s) => s !== first && s !== second)!
    assert.strictEqual(router.choose([a, b, c].filter((s) => s !== first), "e1"), third)
    assert.strictEqual(router.choose([a, b, c], "e1"), third)
    assert.strictEqual(router.episodesOn(first), 0)
    assert.strictEqual(router.episodesOn(second), 1)
    assert.strictEqual(router.episodesOn(third), 1)
  })

  it("an episode idle past the limit is forgotten: it no longer counts, and its next request is placed anew", () => {
    const { a, b, advance, router } = setup()
    const old = router.choose([a, b], "old")
    advance(30_000)
    const recent = router.choose([a, b], "recent")
    assert.notStrictEqual(recent, old)
    advance(31_000)
    // "old" is forgotten (61 s idle), "recent" is not (31 s): old's server is the less loaded.
    assert.strictEqual(router.choose([a, b], "new"), old)
    assert.deepStrictEqual([a, b].map((s) => router.episodesOn(s)), [1, 1])
  })
})
