/**
 * The source of the WebAssembly SIMD128 element-wise kernels (`elementwise-simd.wasm`): the arithmetic of
 * kernels.ts (AdamW, the squared sum, SwiGLU and its backward, RMSNorm and its backward, add, and the row passes of
 * tokenLogprobs) over addresses in an imported shared memory (`env.memory`), four f32 lanes at a time. Any length
 * works: after the vector loop, a tail loop runs the same statements on one element per step (loads of one lane,
 * the others zero; stores of lane 0). Sums of squares and the softmax sums promote each product to f64 lanes
 * before adding (as the spec's f64 sums, in another order); the other sums are f32 lanes combined in f64.
 * {@link assembleElementwise} turns it into the committed .wasm with wabt (build script and test only).
 *
 * @internal
 */
import type { Wabt } from "./wat.js"
import { add, assemble, expLocals, get, mul, set, splat, vadd, vexp, vmul } from "./wat.js"

/** How one step of a {@link stream} reads and writes: four lanes, or (in the tail) lane 0 alone. */
interface Lanes {
  readonly tail: boolean
  /** Which vector of an unrolled step (0 outside unrolled loops): lets a body keep one accumulator per vector. */
  readonly k: number
  /** The f32 lanes of array `base` at the step's index (tail: lane 0, the others 0). */
  readonly ld: (base: string) => string
  /** As {@link ld}, but the tail fills every lane with the element (for maxima). */
  readonly lds: (base: string) => string
  readonly st: (base: string, v: string) => string
  /** `v` with the lanes past the end zeroed (only lane 0 is kept in the tail), before it is summed. */
  readonly keep: (v: string) => string
}

const at = (base: string) => add(get(base), get("i"))
/** Four lanes at byte $i + 16·k (k > 0: the k-th vector of an unrolled step). */
const vector = (k: number): Lanes => {
  const o = k === 0 ? "" : ` offset=${16 * k}`
  return {
    tail: false,
    k,
    ld: (b) => `(v128.load${o} ${at(b)})`,
    lds: (b) => `(v128.load${o} ${at(b)})`,
    st: (b, v) => `(v128.store${o} ${at(b)} ${v})`,
    keep: (v) => v
  }
}
const single: Lanes = {
  tail: true,
  k: 0,
  ld: (b) => `(v128.load32_zero ${at(b)})`,
  lds: (b) => `(v128.load32_splat ${at(b)})`,
  st: (b, v) => `(v128.store32_lane 0 ${at(b)} ${v})`,
  keep: (v) => `(v128.and ${v} (v128.const i32x4 -1 0 0 0))`
}

/**
 * Runs `body` for byte index $i over [0, $nB): `unroll` vectors a step (independent sums run side by side), then 16
 * bytes a step, then 4 (the tail). Uses locals $i, $nB.
 */
const stream = (label: string, body: (l: Lanes) => ReadonlyArray<string>, unroll = 1) => [
  set("i", "(i32.const 0)"),
  ...(unroll === 1 ? [] : [
    `(block $${label}ud (loop $${label}u`,
    `  (br_if $${label}ud (i32.gt_u ${add(get("i"), `(i32.const ${16 * unroll})`)} ${get("nB")}))`,
    ...Array.from({ length: unroll }, (_, k) => body(vector(k))).flat().map((l) => `  ${l}`),
    `  ${set("i", add(get("i"), `(i32.const ${16 * unroll})`))}`,
    `  (br $${label}u)`,
    "))"
  ]),
  `(block $${label}d (loop $${label}`,
  `  (br_if $${label}d (i32.gt_u ${add(get("i"), "(i32.const 16)")} ${get("nB")}))`,
  ...body(vector(0)).map((l) => `  ${l}`),
  `  ${set("i", add(get("i"), "(i32.const 16)"))}`,
  `  (br $${label})`,
  "))",
  `(block $${label}td (loop $${label}t`,
  `  (br_if $${label}td (i32.ge_u ${get("i")} ${get("nB")}))`,
  ...body(single).map((l) => `  ${l}`),
  `  ${set("i", add(get("i"), "(i32.const 4)"))}`,
  `  (br $${label}t)`,
  "))"
]

const vsub = (a: string, b: string) => `(f32x4.sub ${a} ${b})`
const vdiv = (a: string, b: string) => `(f32x4.div ${a} ${b})`
const vs = (name: string) => `(f32x4.splat ${get(name)})`
const one = splat(1)

/** f64x2 lanes of f32x4 `v`'s lanes 0, 1 (`low`) or 2, 3. */
const promote = (v: string, low: boolean) =>
  `(f64x2.promote_low_f32x4 ${low ? v : `(i8x16.shuffle 8 9 10 11 12 13 14 15 8 9 10 11 12 13 14 15 ${v} ${v})`})`
/** Statements adding the f32 lanes of `v` to the f64x2 accumulators $s0 (lanes 0, 1) and $s1 (lanes 2, 3). */
const accumulate64 = (v: string, s0 = "s0", s1 = "s1") => [
  set("t", v),
  set(s0, `(f64x2.add ${get(s0)} ${promote(get("t"), true)})`),
  set(s1, `(f64x2.add ${get(s1)} ${promote(get("t"), false)})`)
]
/** Statements adding the squares of v's lanes, each squared in f64, to $s0 / $s1 (k = 1: $s2 / $s3). */
const squares64 = (v: string, k = 0) => [
  set("t", v),
  ...[true, false].flatMap((low, j) => [
    set("q", promote(get("t"), low)),
    set(`s${2 * k + j}`, `(f64x2.add ${get(`s${2 * k + j}`)} (f64x2.mul ${get("q")} ${get("q")}))`)
  ])
]
/** The f64 sum of the accumulators $a and $b. */
const total64 = (a = "s0", b = "s1") =>
  `(f64.add (f64.add (f64x2.extract_lane 0 ${get(a)}) (f64x2.extract_lane 1 ${get(a)})) ` +
  `(f64.add (f64x2.extract_lane 0 ${get(b)}) (f64x2.extract_lane 1 ${get(b)})))`
const sumLocals = "(local $t v128) (local $q v128) (local $s0 v128) (local $s1 v128)"
const zero64 = ["s0", "s1"].map((s) => set(s, "(v128.const f64x2 0 0)"))

const func = (
  name: string,
  params: string,
  locals: string,
  body: ReadonlyArray<string>,
  result = ""
) =>
  [
    `(func (export "${name}") ${params}${result === "" ? "" : ` (result ${result})`}`,
    `  (local $i i32) (local $nB i32) ${locals}`,
    ...body.map((l) => `  ${l}`),
    ")"
  ].join("\n")

const nBytes = set("nB", mul(get("n"), "(i32.const 4)"))

/** out = a + b. */
const addFunc = () =>
  func("add", "(param $a i32) (param $b i32) (param $n i32) (param $out i32)", "", [
    nBytes,
    ...stream("l", (l) => [l.st("out", vadd(l.ld("a"), l.ld("b")))])
  ])

/** $s ← σ(x) = 1/(1 + exp(−x)) for x in $x (exp's argument clamped to ≤ 88: σ underflows to ~0, not NaN). */
const sigmoid = () => [
  ...vexp("s", `(f32x4.neg ${get("x")})`, 88),
  set("s", vdiv(one, vadd(one, get("s"))))
]
const swigluLocals = `(local $x v128) (local $s v128) ${expLocals}`

const swigluFunc = () =>
  func("swiglu", "(param $g i32) (param $u i32) (param $n i32) (param $act i32)", swigluLocals, [
    nBytes,
    ...stream("l", (l) => [set("x", l.ld("g")), ...sigmoid(), l.st("act", vmul(vmul(get("x"), get("s")), l.ld("u")))])
  ])

const swigluBackwardFunc = () =>
  func(
    "swigluBackward",
    "(param $dAct i32) (param $g i32) (param $u i32) (param $n i32) (param $dGate i32) (param $dUp i32)",
    `${swigluLocals} (local $t v128)`,
    [
      nBytes,
      ...stream("l", (l) => [
        set("x", l.ld("g")),
        ...sigmoid(),
        set("t", vmul(l.ld("dAct"), get("s"))),
        // dGate = dAct·up·s·(1 + g·(1 − s)); dUp = dAct·g·s.
        l.st(
          "dGate",
          vmul(vmul(get("t"), l.ld("u")), vadd(one, vmul(get("x"), vsub(one, get("s")))))
        ),
        l.st("dUp", vmul(get("t"), get("x")))
      ])
    ]
  )

/**
 * p ← p·decay − stepSize·m/(√v·ibc2 + eps) after m, v ← the moments of g·clip (c1 = 1 − b1, c2 = 1 − b2,
 * ibc2 = 1/√(1 − b2^step): a product where the spec divides, as a second f32 division costs as much as the rest).
 */
const adamWFunc = () =>
  func(
    "adamW",
    "(param $p i32) (param $g i32) (param $m i32) (param $v i32) (param $n i32) (param $clip f32) (param $b1 f32) " +
      "(param $c1 f32) (param $b2 f32) (param $c2 f32) (param $eps f32) (param $decay f32) (param $stepSize f32) " +
      "(param $ibc2 f32)",
    "(local $x v128) (local $mm v128) (local $vv v128)",
    [
      nBytes,
      ...stream("l", (l) => [
        set("x", vmul(l.ld("g"), vs("clip"))),
        set("mm", vadd(vmul(vs("b1"), l.ld("m")), vmul(vs("c1"), get("x")))),
        set("vv", vadd(vmul(vs("b2"), l.ld("v")), vmul(vmul(vs("c2"), get("x")), get("x")))),
        l.st("m", get("mm")),
        l.st("v", get("vv")),
        l.st(
          "p",
          vsub(
            vmul(l.ld("p"), vs("decay")),
            vdiv(vmul(vs("stepSize"), get("mm")), vadd(vmul(`(f32x4.sqrt ${get("vv")})`, vs("ibc2")), vs("eps")))
          )
        )
      ])
    ]
  )

/** Σ a² over n values (each square and the sum in f64). */
const sumSquaresFunc = () =>
  func("sumSquares", "(param $a i32) (param $n i32)", `${sumLocals} (local $s2 v128) (local $s3 v128)`, [
    nBytes,
    ...["s0", "s1", "s2", "s3"].map((s) => set(s, "(v128.const f64x2 0 0)")),
    ...stream("l", (l) => squares64(l.ld("a"), l.k), 2),
    `(f64.add ${total64()} ${total64("s2", "s3")})`
  ], "f64")

/** Row loop: for r in [0, rows), `body` with $xr… set to row r's addresses (row bytes $nB). */
const rows = (bases: ReadonlyArray<string>, body: ReadonlyArray<string>) => [
  set("nB", mul(get("dim"), "(i32.const 4)")),
  set("r", "(i32.const 0)"),
  "(block $rd (loop $rl",
  `  (br_if $rd (i32.ge_u ${get("r")} ${get("rows")}))`,
  ...bases.map((b) => `  ${set(`${b}r`, add(get(b), mul(get("r"), get("nB"))))}`),
  ...body.map((l) => `  ${l}`),
  `  ${set("r", add(get("r"), "(i32.const 1)"))}`,
  "  (br $rl)",
  "))"
]

/** y = w ⊙ x·rstd per row, rstd = 1/√(mean(x²) + eps) (the mean of squares summed in f64). */
const rmsNormFunc = () =>
  func(
    "rmsNorm",
    "(param $x i32) (param $rows i32) (param $dim i32) (param $w i32) (param $eps f64) (param $y i32) " +
      "(param $rstd i32)",
    `(local $r i32) (local $xr i32) (local $yr i32) (local $rs f32) (local $rv v128) ${sumLocals}`,
    rows(["x", "y"], [
      ...zero64,
      ...stream("s", (l) => squares64(l.ld("xr"))),
      // As the spec: rstd = f32(1/√(f32(ss/dim) + eps)).
      set(
        "rs",
        `(f32.demote_f64 (f64.div (f64.const 1) (f64.sqrt (f64.add (f64.promote_f32 (f32.demote_f64 (f64.div ${total64()} (f64.convert_i32_u ${
          get("dim")
        })))) ${get("eps")}))))`
      ),
      `(f32.store ${add(get("rstd"), mul(get("r"), "(i32.const 4)"))} ${get("rs")})`,
      set("rv", vs("rs")),
      ...stream("y", (l) => [l.st("yr", vmul(l.ld("w"), vmul(l.ld("xr"), get("rv"))))])
    ])
  )

/**
 * Backward of rmsNorm per row: dx (= or, with accumulate ≠ 0, +=) r·w⊙dy − x·c, c = r³·Σ(w·dy·x)/dim; dW += dy⊙x·r.
 */
const rmsNormBackwardFunc = () =>
  func(
    "rmsNormBackward",
    "(param $dy i32) (param $x i32) (param $rstd i32) (param $rows i32) (param $dim i32) (param $w i32) " +
      "(param $dW i32) (param $dx i32) (param $accumulate i32)",
    "(local $r i32) (local $dyr i32) (local $xr i32) (local $dxr i32) (local $rf f32) (local $rv v128) " +
      `(local $cv v128) (local $keep v128) (local $d v128) (local $e v128) ${sumLocals}`,
    [
      // All ones keeps dx's old value in the sum, all zeros drops it (a mask, so stale NaNs cannot leak in).
      set("keep", `(i32x4.splat (i32.sub (i32.const 0) (i32.ne ${get("accumulate")} (i32.const 0))))`),
      ...rows(["dy", "x", "dx"], [
        set("rf", `(f32.load ${add(get("rstd"), mul(get("r"), "(i32.const 4)"))})`),
        set("rv", vs("rf")),
        ...zero64,
        ...stream("s", (l) => accumulate64(vmul(vmul(l.ld("w"), l.ld("dyr")), l.ld("xr")))),
        set(
          "cv",
          `(f32x4.splat (f32.demote_f64 (f64.div (f64.mul (f64.promote_f32 (f32.mul (f32.mul ${get("rf")} ${
            get("rf")
          }) ${get("rf")})) ${total64()}) (f64.convert_i32_u ${get("dim")}))))`
        ),
        ...stream("g", (l) => [
          set("d", l.ld("dyr")),
          set("e", l.ld("xr")),
          l.st(
            "dxr",
            vadd(
              vsub(vmul(vmul(get("rv"), l.ld("w")), get("d")), vmul(get("e"), get("cv"))),
              `(v128.and ${l.ld("dxr")} ${get("keep")})`
            )
          ),
          l.st("dW", vadd(l.ld("dW"), vmul(vmul(get("d"), get("e")), get("rv"))))
        ])
      ])
    ]
  )

const lanes = (op: string, v: string) =>
  `(${op} (${op} (f32x4.extract_lane 0 ${v}) (f32x4.extract_lane 1 ${v})) ` +
  `(${op} (f32x4.extract_lane 2 ${v}) (f32x4.extract_lane 3 ${v})))`

/** The maximum of a row (`rowMax`), or of z = x/T written to $z (`scaleMax`: the spec's scaled logits). */
const maxFunc = (scaled: boolean) =>
  func(
    scaled ? "scaleMax" : "rowMax",
    `(param $x i32) (param $n i32)${scaled ? " (param $z i32) (param $T f32)" : ""}`,
    "(local $acc v128) (local $v v128)",
    [
      nBytes,
      set("acc", "(v128.const f32x4 -inf -inf -inf -inf)"),
      ...stream("l", (l) =>
        scaled
          ? [
            set("v", vdiv(l.lds("x"), vs("T"))),
            l.st("z", get("v")),
            set("acc", `(f32x4.max ${get("acc")} ${get("v")})`)
          ]
          : [set("acc", `(f32x4.max ${get("acc")} ${l.lds("x")})`)]),
      lanes("f32.max", get("acc"))
    ],
    "f32"
  )

/** e = exp(z − max) over a row; Σ e and Σ e·z (f64) to $stats and $stats + 8. */
const expSumsFunc = () =>
  func(
    "expSums",
    "(param $z i32) (param $n i32) (param $max f32) (param $e i32) (param $stats i32)",
    `(local $mv v128) (local $x v128) (local $v v128) (local $w0 v128) (local $w1 v128) ${sumLocals} ${expLocals}`,
    [
      nBytes,
      ...zero64,
      set("w0", "(v128.const f64x2 0 0)"),
      set("w1", "(v128.const f64x2 0 0)"),
      set("mv", vs("max")),
      ...stream("l", (l) => [
        set("x", l.ld("z")),
        ...vexp("v", vsub(get("x"), get("mv"))),
        l.st("e", get("v")),
        set("v", l.keep(get("v"))),
        ...accumulate64(get("v")),
        ...accumulate64(vmul(get("v"), get("x")), "w0", "w1")
      ]),
      `(f64.store ${get("stats")} ${total64()})`,
      `(f64.store offset=8 ${get("stats")} ${total64("w0", "w1")})`
    ]
  )

/** The logits' gradient over a row: out = −p·(w + ew·(z + shift))·invT, p = e·inv. */
const rowGradFunc = () =>
  func(
    "rowGrad",
    "(param $z i32) (param $e i32) (param $n i32) (param $out i32) (param $inv f32) (param $shift f32) " +
      "(param $w f32) (param $ew f32) (param $invT f32)",
    "(local $nv v128) (local $sv v128) (local $wv v128) (local $ev v128)",
    [
      nBytes,
      set("nv", `(f32x4.splat (f32.neg (f32.mul ${get("inv")} ${get("invT")})))`),
      set("sv", vs("shift")),
      set("wv", vs("w")),
      set("ev", vs("ew")),
      ...stream("l", (l) => [
        l.st(
          "out",
          vmul(vmul(l.ld("e"), get("nv")), vadd(get("wv"), vmul(get("ev"), vadd(l.ld("z"), get("sv")))))
        )
      ])
    ]
  )

/** A counted loop of `body` over local $v from 0 while $v < $end. */
const count = (v: string, end: string, body: ReadonlyArray<string>) => [
  set(v, "(i32.const 0)"),
  `(block $${v}d (loop $${v}l`,
  `  (br_if $${v}d (i32.ge_u ${get(v)} ${get(end)}))`,
  ...body.map((l) => `  ${l}`),
  `  ${set(v, add(get(v), "(i32.const 1)"))}`,
  `  (br $${v}l)`,
  "))"
]

/**
 * Rotary embedding (rotate_half) of x [rows, heads, 2·half] into y (y may be x): row n at table row pos[n] of
 * cos / sin [positions, half]; sign −1 rotates back (the backward).
 */
const ropeFunc = () =>
  func(
    "rope",
    "(param $x i32) (param $rows i32) (param $heads i32) (param $half i32) (param $pos i32) (param $cos i32) " +
      "(param $sin i32) (param $sign f32) (param $y i32)",
    "(local $n i32) (local $h i32) (local $o i32) (local $xa i32) (local $xb i32) (local $ya i32) (local $yb i32) " +
      "(local $cr i32) (local $sr i32) (local $a v128) (local $b v128) (local $c v128) (local $s v128)",
    [
      set("nB", mul(get("half"), "(i32.const 4)")),
      ...count("n", "rows", [
        set("cr", mul(`(i32.load ${add(get("pos"), mul(get("n"), "(i32.const 4)"))})`, get("nB"))),
        set("sr", add(get("sin"), get("cr"))),
        set("cr", add(get("cos"), get("cr"))),
        ...count("h", "heads", [
          set("o", mul(add(mul(get("n"), get("heads")), get("h")), mul(get("nB"), "(i32.const 2)"))),
          set("xa", add(get("x"), get("o"))),
          set("xb", add(get("xa"), get("nB"))),
          set("ya", add(get("y"), get("o"))),
          set("yb", add(get("ya"), get("nB"))),
          ...stream("l", (l) => [
            set("a", l.ld("xa")),
            set("b", l.ld("xb")),
            set("c", l.ld("cr")),
            set("s", vmul(l.ld("sr"), vs("sign"))),
            l.st("ya", vsub(vmul(get("a"), get("c")), vmul(get("b"), get("s")))),
            l.st("yb", vadd(vmul(get("b"), get("c")), vmul(get("a"), get("s"))))
          ])
        ])
      ])
    ]
  )

/** The module: the kernels over an imported shared memory (the tensors' home). */
export const elementwiseWat = (): string =>
  [
    "(module",
    `(import "env" "memory" (memory 1 65536 shared))`,
    addFunc(),
    swigluFunc(),
    swigluBackwardFunc(),
    adamWFunc(),
    sumSquaresFunc(),
    rmsNormFunc(),
    rmsNormBackwardFunc(),
    maxFunc(false),
    maxFunc(true),
    expSumsFunc(),
    rowGradFunc(),
    ropeFunc(),
    ")"
  ].join("\n")

/** The committed build of {@link elementwiseWat}, beside this file. */
export const elementwiseWasmFile = "elementwise-simd.wasm"

/** Assembles {@link elementwiseWat} into the bytes of elementwise-simd.wasm. */
export const assembleElementwise = (w: Wabt): Uint8Array => assemble(w, elementwiseWasmFile, elementwiseWat())
