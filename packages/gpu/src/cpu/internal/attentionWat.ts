/**
 * The source of the WebAssembly SIMD128 attention kernels: WebAssembly text for the two inner products of
 * `attentionKernels.ts` (`scores` and `accumulate`, same arguments as addresses and byte strides), vectorised
 * along head_dim (which must be a multiple of 4). Written out by this generator because each block is the same
 * line for every accumulator. {@link assembleAttention} turns it into the committed `attention-simd.wasm` with wabt
 * (npm), given to it by the build script so that nothing here depends on wabt at run time; rebuilding must give the
 * same bytes. The module imports its memory (`env.memory`, shared), so it works in place on tensors that live there,
 * such as those the WebAssembly matmul route allocates.
 *
 * @internal
 */
import type { Wabt } from "./wat.js"
import { add, assemble, expLocals, get, load, mul, range, set, splat, vadd, vexp, vmul, zero } from "./wat.js"

/** i8x16.shuffle of f32 lanes (0–3 from the first operand, 4–7 from the second). */
const shuffle = (lanes: ReadonlyArray<number>, a: string, b: string) =>
  `(i8x16.shuffle ${lanes.flatMap((l) => range(4).map((i) => 4 * l + i)).join(" ")} ${a} ${b})`

/** The four lane sums of v0…v3 as one vector (lane i = Σ lanes of vi): two rounds of shuffles and adds. */
const hsum4 = (v: ReadonlyArray<string>) => {
  const pair = (a: string, b: string) => vadd(shuffle([0, 4, 1, 5], a, b), shuffle([2, 6, 3, 7], a, b))
  // pair(a, b) = (a0+a2, b0+b2, a1+a3, b1+b3); combining two pairs' halves gives (Σa, Σb, Σc, Σd).
  return `(local.set $h01 ${pair(v[0], v[1])}) (local.set $h23 ${pair(v[2], v[3])}) ` +
    vadd(shuffle([0, 1, 4, 5], get("h01"), get("h23")), shuffle([2, 3, 6, 7], get("h01"), get("h23")))
}

/** The sum of v's four lanes (f32). */
const hsum1 = (v: string) =>
  `(f32.add (f32.add (f32x4.extract_lane 0 ${v}) (f32x4.extract_lane 1 ${v})) ` +
  `(f32.add (f32x4.extract_lane 2 ${v}) (f32x4.extract_lane 3 ${v})))`

/** A do-while over d = 0, 16, … < dB (bytes): head_dim is a positive multiple of 4, so it runs at least once. */
const dLoop = (body: ReadonlyArray<string>) => [
  set("d", "(i32.const 0)"),
  "(loop $dl",
  ...body.map((l) => `  ${l}`),
  `  ${set("d", add(get("d"), "(i32.const 16)"))}`,
  `  (br_if $dl (i32.lt_u ${get("d")} ${get("dB")}))`,
  ")"
]

/** `scores` for `rows` (1 or 2) rows from row `r`: quads of columns, then single columns, up to `$end`. */
const scoreRows = (rows: 1 | 2) => {
  const R = range(rows)
  const quad = [
    "(block $qd (loop $ql",
    `  (br_if $qd (i32.gt_s ${add(get("c"), "(i32.const 4)")} ${get("end")}))`,
    `  ${set("y0", add(get("b"), mul(get("c"), get("bs"))))}`,
    ...range(3).map((j) => `  ${set(`y${j + 1}`, add(get(`y${j}`), get("bs")))}`),
    ...R.flatMap((i) => range(4).map((j) => `  ${set(`p${i}${j}`, zero)}`)),
    ...dLoop([
      ...R.map((i) => set(`u${i}`, load(add(get(`x${i}`), get("d"))))),
      ...range(4).map((j) => set(`k${j}`, load(add(get(`y${j}`), get("d"))))),
      ...R.flatMap((i) =>
        range(4).map((j) => set(`p${i}${j}`, vadd(get(`p${i}${j}`), vmul(get(`u${i}`), get(`k${j}`)))))
      )
    ]).map((l) => `  ${l}`),
    ...R.map((i) =>
      `  (v128.store ${add(get(`s${i}`), mul(get("c"), "(i32.const 4)"))} ` +
      `${vmul(hsum4(range(4).map((j) => get(`p${i}${j}`))), get("sc"))})`
    ),
    `  ${set("c", add(get("c"), "(i32.const 4)"))}`,
    "  (br $ql)",
    "))"
  ]
  const single = [
    "(block $sd (loop $sl",
    `  (br_if $sd (i32.ge_s ${get("c")} ${get("end")}))`,
    `  ${set("y0", add(get("b"), mul(get("c"), get("bs"))))}`,
    ...R.map((i) => `  ${set(`p${i}0`, zero)}`),
    ...dLoop([
      set("k0", load(add(get("y0"), get("d")))),
      ...R.map((i) => set(`p${i}0`, vadd(get(`p${i}0`), vmul(load(add(get(`x${i}`), get("d"))), get("k0")))))
    ]).map((l) => `  ${l}`),
    ...R.map((i) =>
      `  (f32.store ${add(get(`s${i}`), mul(get("c"), "(i32.const 4)"))} ` +
      `(f32.mul ${hsum1(get(`p${i}0`))} ${get("scale")}))`
    ),
    `  ${set("c", add(get("c"), "(i32.const 1)"))}`,
    "  (br $sl)",
    "))"
  ]
  return [
    set("x0", add(get("a"), mul(get("r"), get("as")))),
    set("x1", add(get("x0"), get("as"))),
    set("s0", add(get("s"), mul(get("r"), get("ldS")))),
    set("s1", add(get("s0"), get("ldS"))),
    // end = min(c1, diag + step·(r + rows − 1) + 1): the columns the last row of the block may see.
    set("end", add(get("diag"), add(mul(get("step"), add(get("r"), `(i32.const ${rows - 1})`)), "(i32.const 1)"))),
    set("end", `(select ${get("c1")} ${get("end")} (i32.lt_s ${get("c1")} ${get("end")}))`),
    set("c", get("c0")),
    ...quad,
    ...single
  ]
}

const scoresFunc = () => {
  const v128Locals = [
    "sc",
    "h01",
    "h23",
    "u0",
    "u1",
    ...range(4).map((j) => `k${j}`),
    ...range(2).flatMap((i) => range(4).map((j) => `p${i}${j}`))
  ]
  const i32Locals = ["r", "x0", "x1", "s0", "s1", "end", "c", "y0", "y1", "y2", "y3", "d", "dB"]
  return [
    `(func (export "scores") (param $a i32) (param $as i32) (param $b i32) (param $bs i32) (param $D i32)`,
    `  (param $rows i32) (param $c0 i32) (param $c1 i32) (param $diag i32) (param $step i32) (param $scale f32)`,
    `  (param $s i32)`,
    `  (param $ldS i32)`,
    `  ${i32Locals.map((l) => `(local $${l} i32)`).join(" ")}`,
    `  ${v128Locals.map((l) => `(local $${l} v128)`).join(" ")}`,
    set("dB", mul(get("D"), "(i32.const 4)")),
    set("sc", `(f32x4.splat ${get("scale")})`),
    set("r", "(i32.const 0)"),
    "(block $rd (loop $rl",
    `  (br_if $rd (i32.ge_s ${add(get("r"), "(i32.const 1)")} ${get("rows")}))`,
    ...scoreRows(2).map((l) => `  ${l}`),
    `  ${set("r", add(get("r"), "(i32.const 2)"))}`,
    "  (br $rl)",
    "))",
    `(if (i32.lt_s ${get("r")} ${get("rows")}) (then`,
    ...scoreRows(1).map((l) => `  ${l}`),
    "))",
    ")"
  ].join("\n")
}

/** `accumulate` for `rows` (1 or 2) rows from row `r`: quads of k (skipped when all weights are 0), then single k. */
const accumulateRows = (rows: 1 | 2) => {
  const R = range(rows)
  const w = (i: number, j: number) => `w${i}${j}`
  const allZero = (names: ReadonlyArray<string>) =>
    names.map((n) => `(f32.eq ${get(n)} (f32.const 0))`).reduce((acc, e) => `(i32.and ${acc} ${e})`)
  const update = (i: number, ks: ReadonlyArray<number>) => {
    const terms = ks.map((j) => vmul(get(`v${i}${j}`), get(`x${j}`)))
    const sum = terms.length === 4 ? vadd(vadd(terms[0], terms[1]), vadd(terms[2], terms[3])) : terms[0]
    return `(v128.store ${add(get(`o${i}`), get("d"))} ${vadd(load(add(get(`o${i}`), get("d"))), sum)})`
  }
  const quad = [
    "(block $qd (loop $ql",
    `  (br_if $qd (i32.gt_s ${add(get("k"), "(i32.const 4)")} ${get("k1")}))`,
    `  ${set("p", mul(get("k"), get("wCol")))}`,
    ...R.flatMap((i) =>
      range(4).map((j) =>
        `  ${set(w(i, j), `(f32.load ${add(get(`wa${i}`), add(get("p"), mul(`(i32.const ${j})`, get("wCol"))))})`)}`
      )
    ),
    `  (if (i32.eqz ${allZero(R.flatMap((i) => range(4).map((j) => w(i, j))))}) (then`,
    ...R.flatMap((i) => range(4).map((j) => `    ${set(`v${i}${j}`, `(f32x4.splat ${get(w(i, j))})`)}`)),
    `    ${set("y0", add(get("x"), mul(get("k"), get("xs"))))}`,
    ...range(3).map((j) => `    ${set(`y${j + 1}`, add(get(`y${j}`), get("xs")))}`),
    ...dLoop([
      ...range(4).map((j) => set(`x${j}`, load(add(get(`y${j}`), get("d"))))),
      ...R.map((i) => update(i, range(4)))
    ]).map((l) => `    ${l}`),
    "  ))",
    `  ${set("k", add(get("k"), "(i32.const 4)"))}`,
    "  (br $ql)",
    "))"
  ]
  const single = [
    "(block $sd (loop $sl",
    `  (br_if $sd (i32.ge_s ${get("k")} ${get("k1")}))`,
    `  ${set("p", mul(get("k"), get("wCol")))}`,
    ...R.map((i) => `  ${set(w(i, 0), `(f32.load ${add(get(`wa${i}`), get("p"))})`)}`),
    `  (if (i32.eqz ${allZero(R.map((i) => w(i, 0)))}) (then`,
    ...R.map((i) => `    ${set(`v${i}0`, `(f32x4.splat ${get(w(i, 0))})`)}`),
    `    ${set("y0", add(get("x"), mul(get("k"), get("xs"))))}`,
    ...dLoop([set("x0", load(add(get("y0"), get("d")))), ...R.map((i) => update(i, [0]))]).map((l) => `    ${l}`),
    "  ))",
    `  ${set("k", add(get("k"), "(i32.const 1)"))}`,
    "  (br $sl)",
    "))"
  ]
  return [
    set("o0", add(get("cA"), mul(get("r"), get("cs")))),
    set("o1", add(get("o0"), get("cs"))),
    set("wa0", add(get("w"), mul(get("r"), get("wRow")))),
    set("wa1", add(get("wa0"), get("wRow"))),
    set("k", get("k0")),
    ...quad,
    ...single
  ]
}

const accumulateFunc = () => {
  const f32Locals = range(2).flatMap((i) => range(4).map((j) => `w${i}${j}`))
  const v128Locals = [...range(2).flatMap((i) => range(4).map((j) => `v${i}${j}`)), ...range(4).map((j) => `x${j}`)]
  const i32Locals = ["r", "o0", "o1", "wa0", "wa1", "k", "p", "y0", "y1", "y2", "y3", "d", "dB"]
  return [
    `(func (export "accumulate") (param $w i32) (param $wRow i32) (param $wCol i32) (param $x i32) (param $xs i32)`,
    `  (param $cA i32) (param $cs i32) (param $D i32) (param $rows i32) (param $k0 i32) (param $k1 i32)`,
    `  ${i32Locals.map((l) => `(local $${l} i32)`).join(" ")}`,
    `  ${f32Locals.map((l) => `(local $${l} f32)`).join(" ")}`,
    `  ${v128Locals.map((l) => `(local $${l} v128)`).join(" ")}`,
    set("dB", mul(get("D"), "(i32.const 4)")),
    set("r", "(i32.const 0)"),
    "(block $rd (loop $rl",
    `  (br_if $rd (i32.ge_s ${add(get("r"), "(i32.const 1)")} ${get("rows")}))`,
    ...accumulateRows(2).map((l) => `  ${l}`),
    `  ${set("r", add(get("r"), "(i32.const 2)"))}`,
    "  (br $rl)",
    "))",
    `(if (i32.lt_s ${get("r")} ${get("rows")}) (then`,
    ...accumulateRows(1).map((l) => `  ${l}`),
    "))",
    ")"
  ].join("\n")
}

/** Scalar loop over c ∈ [from, to) running `body` (statements). */
const each = (label: string, from: string, to: string, body: ReadonlyArray<string>) => [
  set("c", from),
  `(block $${label}d (loop $${label}`,
  `  (br_if $${label}d (i32.ge_s ${get("c")} ${to}))`,
  ...body.map((l) => `  ${l}`),
  `  ${set("c", add(get("c"), "(i32.const 1)"))}`,
  `  (br $${label})`,
  "))"
]

/** Vector loop over c = `start`, +4 … while c + 4 ≤ hi + 1, running `body` (statements); leaves c after it. */
const quads = (label: string, start: string, body: ReadonlyArray<string>) => [
  set("c", start),
  `(block $${label}d (loop $${label}`,
  `  (br_if $${label}d (i32.gt_s ${add(get("c"), "(i32.const 4)")} ${add(get("hi"), "(i32.const 1)")}))`,
  ...body.map((l) => `  ${l}`),
  `  ${set("c", add(get("c"), "(i32.const 4)"))}`,
  `  (br $${label})`,
  "))"
]

const at = (base: string) => add(get(base), mul(get("c"), "(i32.const 4)"))
const zeroRange = (label: string, rows: ReadonlyArray<string>, from: string, to: string) =>
  each(label, from, to, rows.map((r) => `(f32.store ${at(r)} (f32.const 0))`))

/**
 * `softmaxRow`: one query row's online-softmax step over its tile scores (see attentionKernels.ts' softmaxRow):
 * probabilities exp(s − m) on lo…hi, zeros elsewhere in [c0, c1), the running max and normaliser at $m and $l
 * updated, the output row at $o (D values) rescaled by exp(mOld − m).
 */
const softmaxRowFunc = () => {
  const lanes = (op: string, v: string) =>
    `(${op} (${op} (f32x4.extract_lane 0 ${v}) (f32x4.extract_lane 1 ${v})) ` +
    `(${op} (f32x4.extract_lane 2 ${v}) (f32x4.extract_lane 3 ${v})))`
  return [
    `(func (export "softmaxRow") (param $s i32) (param $c0 i32) (param $lo i32) (param $hi i32) (param $c1 i32)`,
    `  (param $m i32) (param $l i32) (param $o i32) (param $D i32)`,
    `  (local $c i32) (local $d i32) (local $dB i32) (local $mx f32) (local $mOld f32) (local $mNew f32)`,
    `  (local $corr f32)`,
    `  (local $sum f32) (local $v v128) (local $acc v128) ${expLocals}`,
    `(if (i32.gt_s ${get("lo")} ${get("hi")}) (then`,
    ...zeroRange("z0", ["s"], get("c0"), get("c1")).map((l) => `  ${l}`),
    "  (return)",
    "))",
    set("acc", "(v128.const f32x4 -inf -inf -inf -inf)"),
    ...quads("mq", get("lo"), [set("acc", `(f32x4.max ${get("acc")} (v128.load ${at("s")}))`)]),
    set("mx", lanes("f32.max", get("acc"))),
    ...each("ms", get("c"), add(get("hi"), "(i32.const 1)"), [
      set("mx", `(f32.max ${get("mx")} (f32.load ${at("s")}))`)
    ]),
    set("mOld", `(f32.load ${get("m")})`),
    set("mNew", `(f32.max ${get("mOld")} ${get("mx")})`),
    // The first tile a row sees has mOld = −∞: nothing to rescale (corr = 0, as exp(−∞)).
    ...vexp("v", `(f32x4.splat (f32.sub ${get("mOld")} ${get("mNew")}))`),
    set("corr", `(select (f32.const 0) (f32x4.extract_lane 0 ${get("v")}) (f32.eq ${get("mOld")} (f32.const -inf)))`),
    ...zeroRange("z1", ["s"], get("c0"), get("lo")),
    set("acc", splat(0)),
    ...quads("eq", get("lo"), [
      ...vexp("v", `(f32x4.sub (v128.load ${at("s")}) (f32x4.splat ${get("mNew")}))`),
      `(v128.store ${at("s")} ${get("v")})`,
      set("acc", vadd(get("acc"), get("v")))
    ]),
    set("sum", lanes("f32.add", get("acc"))),
    ...each("es", get("c"), add(get("hi"), "(i32.const 1)"), [
      ...vexp("v", `(f32x4.splat (f32.sub (f32.load ${at("s")}) ${get("mNew")}))`),
      `(f32.store ${at("s")} (f32x4.extract_lane 0 ${get("v")}))`,
      set("sum", `(f32.add ${get("sum")} (f32x4.extract_lane 0 ${get("v")}))`)
    ]),
    ...zeroRange("z2", ["s"], add(get("hi"), "(i32.const 1)"), get("c1")),
    `(f32.store ${get("l")} (f32.add (f32.mul (f32.load ${get("l")}) ${get("corr")}) ${get("sum")}))`,
    `(f32.store ${get("m")} ${get("mNew")})`,
    `(if (f32.ne ${get("corr")} (f32.const 1)) (then`,
    `  ${set("v", `(f32x4.splat ${get("corr")})`)}`,
    `  ${set("dB", mul(get("D"), "(i32.const 4)"))}`,
    ...dLoop([
      `(v128.store ${add(get("o"), get("d"))} ${vmul(load(add(get("o"), get("d"))), get("v"))})`
    ]).map((l) => `  ${l}`),
    "))",
    ")"
  ].join("\n")
}

/**
 * `gradRow`: one query row of the backward over a tile (see attentionKernels.ts' gradRow): on lo…hi,
 * P = exp(s − L) over the scores at $p and dS = P·(dP − delta)·scale over dP at $q; zeros elsewhere in [c0, c1).
 */
const gradRowFunc = () =>
  [
    `(func (export "gradRow") (param $p i32) (param $q i32) (param $c0 i32) (param $lo i32) (param $hi i32)`,
    `  (param $c1 i32) (param $L f32) (param $delta f32) (param $scale f32)`,
    `  (local $c i32) (local $v v128) (local $vl v128) (local $vd v128) (local $vs v128) (local $e f32) ${expLocals}`,
    ...zeroRange(
      "z0",
      ["p", "q"],
      get("c0"),
      `(select ${get("lo")} ${get("c1")} (i32.lt_s ${get("lo")} ${get("c1")}))`
    ),
    set("vl", `(f32x4.splat ${get("L")})`),
    set("vd", `(f32x4.splat ${get("delta")})`),
    set("vs", `(f32x4.splat ${get("scale")})`),
    ...quads("gq", get("lo"), [
      ...vexp("v", `(f32x4.sub (v128.load ${at("p")}) ${get("vl")})`),
      `(v128.store ${at("p")} ${get("v")})`,
      `(v128.store ${at("q")} ${vmul(vmul(get("v"), `(f32x4.sub (v128.load ${at("q")}) ${get("vd")})`), get("vs"))})`
    ]),
    ...each("gs", get("c"), add(get("hi"), "(i32.const 1)"), [
      ...vexp("v", `(f32x4.splat (f32.sub (f32.load ${at("p")}) ${get("L")}))`),
      set("e", `(f32x4.extract_lane 0 ${get("v")})`),
      `(f32.store ${at("p")} ${get("e")})`,
      `(f32.store ${at("q")} (f32.mul (f32.mul ${get("e")} (f32.sub (f32.load ${at("q")}) ${get("delta")})) ${
        get("scale")
      }))`
    ]),
    ...zeroRange(
      "z1",
      ["p", "q"],
      `(select ${add(get("hi"), "(i32.const 1)")} ${get("c0")} (i32.gt_s ${add(get("hi"), "(i32.const 1)")} ${
        get("c0")
      }))`,
      get("c1")
    ),
    ")"
  ].join("\n")

/** The module: the kernels over an imported shared memory (the tensors' home). */
export const attentionWat = (): string =>
  [
    "(module",
    `(import "env" "memory" (memory 1 65536 shared))`,
    scoresFunc(),
    accumulateFunc(),
    softmaxRowFunc(),
    gradRowFunc(),
    ")"
  ].join("\n")

/** The committed build of {@link attentionWat}, beside this file. */
export const attentionWasmFile = "attention-simd.wasm"

/** Assembles {@link attentionWat} into the bytes of attention-simd.wasm. */
export const assembleAttention = (w: Wabt): Uint8Array => assemble(w, attentionWasmFile, attentionWat())
