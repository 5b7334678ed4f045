/**
 * The source of the WebAssembly sgemm: WebAssembly text, written out by this generator because the register-blocked
 * micro-kernel is the same few lines repeated for every accumulator (MR rows × NR columns) and every edge height;
 * writing those out by hand would be a few hundred lines of near-copies. `sgemmBuild.ts` assembles the text with
 * wabt into the committed `sgemm-*.wasm`.
 *
 * Algorithm (GotoBLAS's loop nest; A packed only when transposed): C[M×N] = alpha·op(A)·op(B) + beta·C, row-major.
 * - B is packed per (NC columns × KC depth) block into NR-wide panels, zero-padded: panel q holds, for each k, the
 *   NR values B(k, q·NR … q·NR+NR-1). Packing is where transB is handled; the block is reused by every row block.
 * - A is read in place when not transposed: a micro-kernel reads MR rows of A at one k as MR broadcast loads (kernel
 *   family "N", rows at stride lda, k at +4 bytes). A transposed (stored K×M) would put each k of a micro-panel on
 *   another row of A — another page every k for the backward's long K — so its (MC × KC) block is packed into
 *   MR-row panels, k-major (family "T": the MR values of one k contiguous, k at +MR·4 bytes).
 * - The micro-kernel keeps an MR × NR block of C in MR·NR/4 v128 accumulators for the whole KC depth, then stores
 *   alpha·acc + beta·C (beta of the first depth block, 1 after). beta = 0 never reads C (BLAS semantics: C may hold
 *   NaN). Column edges go through a small tile; row edges have their own kernels (mr = 1 … MR-1).
 *
 * @internal
 */

/** Which multiply-add the kernel uses: SIMD128 mul then add (rounds twice), or relaxed-SIMD's madd (fused where the
 * CPU has FMA, so results can differ between CPUs in the last bits). */
export type WasmVariant = "simd" | "relaxed-simd"

/** Blocking parameters, in elements. MR·NR/4 accumulators plus NR/4 B vectors plus one broadcast must fit the 16
 * vector registers of x64 (V8 keeps one as scratch). */
export interface Blocking {
  readonly MR: number
  readonly NR: number
  readonly KC: number
  readonly MC: number
  readonly NC: number
  /** k steps per loop iteration. Measured on a Xeon (AVX-512) under V8 11.3: U = 1 beat U = 2 and 4 by ~25 %, and
   * 4×8 beat 6×8, 5×8, 4×12 and 3×16 (more accumulators spill), at KC 128 … 512 alike. */
  readonly U: number
}

export const blocking: Blocking = { MR: 4, NR: 8, KC: 256, MC: 64, NC: 2048, U: 1 }

/** Bytes of scratch the exported `sgemm` needs at `work`: the edge tile, then one packed B block. */
export const workBytes = (b: Blocking = blocking) =>
  b.MR * b.NR * 4 + b.MC * b.KC * 4 + b.KC * Math.ceil(b.NC / b.NR) * b.NR * 4

/** Up to this many rows, A·Bᵀ takes the dot-product path ({@link dotNT}) instead of packing B. */
export const SMALL_M = 8

const range = (n: number) => Array.from({ length: n }, (_, i) => i)

/** One micro-kernel for `mr` rows; `family` "N" reads A rows at a variable stride and k at +4 bytes, "T" reads the
 * mr values of one k contiguously (transposed A) and k at a variable stride. */
const kernel = (b: Blocking, variant: WasmVariant, family: "N" | "T", mr: number) => {
  const V = b.NR / 4
  const fma = (a: string, x: string, c: string) =>
    variant === "relaxed-simd" ? `(f32x4.relaxed_madd ${a} ${x} ${c})` : `(f32x4.add (f32x4.mul ${a} ${x}) ${c})`
  const accs = range(mr).flatMap((r) => range(V).map((v) => `$c${r}_${v}`))
  const aPtrs = family === "N" ? range(mr).map((r) => `$a${r}`) : ["$a0"]
  const lines: Array<string> = []
  lines.push(
    `(func $k${family}${mr} (param $pa i32) (param $rs i32) (param $ks i32) (param $pb i32) (param $kc i32)`,
    `  (param $pc i32) (param $ldc i32) (param $alpha f32) (param $beta f32) (param $nr i32) (param $tile i32)`,
    `  (local $end i32) (local $endU i32) (local $s v128) (local $al v128) (local $be v128) (local $p i32) (local $r i32) (local $j i32)`,
    `  ${aPtrs.map((p) => `(local ${p} i32)`).join(" ")} ${
      range(b.U).slice(1).map((u) => `(local $t${u} i32)`).join(" ")
    }`,
    `  ${range(V).map((v) => `(local $b${v} v128)`).join(" ")}`,
    `  ${accs.map((c) => `(local ${c} v128)`).join(" ")}`
  )
  if (family === "N") {
    for (const r of range(mr)) {
      lines.push(`  (local.set $a${r} (i32.add (local.get $pa) (i32.mul (local.get $rs) (i32.const ${r}))))`)
    }
  } else {
    lines.push(`  (local.set $a0 (local.get $pa))`)
  }
  // k steps: U at a time (immediate offsets instead of pointer bumps), then the kc mod U left one at a time.
  const step = (u: number, unrolled: boolean) => {
    const out: Array<string> = []
    for (const v of range(V)) {
      out.push(`    (local.set $b${v} (v128.load offset=${(u * b.NR + v * 4) * 4} (local.get $pb)))`)
    }
    for (const r of range(mr)) {
      const load = family === "N"
        ? `(v128.load32_splat offset=${u * 4} (local.get $a${r}))`
        : `(v128.load32_splat offset=${r * 4} (local.get ${u === 0 ? "$a0" : `$t${u}`}))`
      out.push(`    (local.set $s ${load})`)
      for (const v of range(V)) {
        out.push(
          `    (local.set $c${r}_${v} ${fma("(local.get $s)", `(local.get $b${v})`, `(local.get $c${r}_${v})`)})`
        )
      }
    }
    const n = unrolled ? b.U : 1
    if (u === n - 1) {
      if (family === "N") {
        for (const r of range(mr)) out.push(`    (local.set $a${r} (i32.add (local.get $a${r}) (i32.const ${4 * n})))`)
      } else {
        out.push(`    (local.set $a0 (i32.add (local.get $a0) (i32.mul (local.get $ks) (i32.const ${n}))))`)
      }
      out.push(`    (local.set $pb (i32.add (local.get $pb) (i32.const ${n * b.NR * 4})))`)
    }
    return out
  }
  lines.push(
    `  (local.set $end (i32.add (local.get $pb) (i32.mul (local.get $kc) (i32.const ${b.NR * 4}))))`,
    `  (local.set $endU (i32.add (local.get $pb) (i32.mul (i32.sub (local.get $kc) (i32.rem_u (local.get $kc) (i32.const ${b.U})))`,
    `    (i32.const ${b.NR * 4}))))`,
    `  (if (i32.lt_u (local.get $pb) (local.get $endU)) (then`,
    `  (loop $k`
  )
  if (family === "T") {
    for (const u of range(b.U).slice(1)) {
      lines.push(`    (local.set $t${u} (i32.add (local.get $a0) (i32.mul (local.get $ks) (i32.const ${u}))))`)
    }
  }
  for (const u of range(b.U)) lines.push(...step(u, true))
  lines.push(
    `    (br_if $k (i32.lt_u (local.get $pb) (local.get $endU))))))`,
    `  (if (i32.lt_u (local.get $pb) (local.get $end)) (then`,
    `  (loop $k1`,
    ...step(0, false),
    `    (br_if $k1 (i32.lt_u (local.get $pb) (local.get $end))))))`,
    `  (local.set $al (f32x4.splat (local.get $alpha)))`,
    `  (local.set $be (f32x4.splat (local.get $beta)))`,
    `  (if (i32.eq (local.get $nr) (i32.const ${b.NR}))`,
    `    (then`,
    `      (if (f32.eq (local.get $beta) (f32.const 0))`,
    `        (then`
  )
  const cAddr = (r: number) => `(i32.add (local.get $pc) (i32.mul (local.get $ldc) (i32.const ${r})))`
  for (const r of range(mr)) {
    lines.push(`          (local.set $p ${cAddr(r)})`)
    for (const v of range(V)) {
      lines.push(
        `          (v128.store offset=${v * 16} (local.get $p) (f32x4.mul (local.get $c${r}_${v}) (local.get $al)))`
      )
    }
  }
  lines.push(`        )`, `        (else`)
  for (const r of range(mr)) {
    lines.push(`          (local.set $p ${cAddr(r)})`)
    for (const v of range(V)) {
      lines.push(
        `          (v128.store offset=${
          v * 16
        } (local.get $p) (f32x4.add (f32x4.mul (local.get $c${r}_${v}) (local.get $al))`,
        `            (f32x4.mul (v128.load offset=${v * 16} (local.get $p)) (local.get $be))))`
      )
    }
  }
  lines.push(`        )))`, `    (else`)
  // Column edge: the accumulators go to the tile, then only the nr valid columns reach C.
  for (const r of range(mr)) {
    for (const v of range(V)) {
      lines.push(`      (v128.store offset=${(r * b.NR + v * 4) * 4} (local.get $tile) (local.get $c${r}_${v}))`)
    }
  }
  lines.push(
    `      (local.set $r (i32.const 0))`,
    `      (loop $rows`,
    `        (local.set $j (i32.const 0))`,
    `        (loop $cols`,
    `          (local.set $p (i32.add (i32.add (local.get $pc) (i32.mul (local.get $r) (local.get $ldc)))`,
    `            (i32.shl (local.get $j) (i32.const 2))))`,
    // select evaluates both operands: beta·C is read and thrown away when beta = 0 (C is in bounds either way).
    `          (f32.store (local.get $p) (f32.add`,
    `            (f32.mul (local.get $alpha) (f32.load (i32.add (local.get $tile)`,
    `              (i32.shl (i32.add (i32.mul (local.get $r) (i32.const ${b.NR})) (local.get $j)) (i32.const 2)))))`,
    `            (select (f32.mul (local.get $beta) (f32.load (local.get $p))) (f32.const 0)`,
    `              (f32.ne (local.get $beta) (f32.const 0)))))`,
    `          (local.set $j (i32.add (local.get $j) (i32.const 1)))`,
    `          (br_if $cols (i32.lt_u (local.get $j) (local.get $nr))))`,
    `        (local.set $r (i32.add (local.get $r) (i32.const 1)))`,
    `        (br_if $rows (i32.lt_u (local.get $r) (i32.const ${mr}))))))`,
    `)`
  )
  return lines.join("\n")
}

/** Packs B's (kc × nc) block at (k0, j0) into NR-wide panels at dst, zero-padded to a whole panel. */
const packB = (b: Blocking) => {
  const V = b.NR / 4
  return `(func $packB (param $tb i32) (param $b i32) (param $ldb i32) (param $k0 i32) (param $j0 i32) (param $kc i32)
  (param $nc i32) (param $dst i32)
  (local $jr i32) (local $k i32) (local $j i32) (local $w i32) (local $src i32) (local $d i32) (local $ldbB i32)
  (local.set $ldbB (i32.shl (local.get $ldb) (i32.const 2)))
  (local.set $jr (i32.const 0))
  (loop $panels
    (local.set $w (select (i32.sub (local.get $nc) (local.get $jr)) (i32.const ${b.NR})
      (i32.lt_u (i32.sub (local.get $nc) (local.get $jr)) (i32.const ${b.NR}))))
    (if (i32.eqz (local.get $tb))
      (then
        ;; B(k, j) at (k0+k)·ldb + j0+jr+j: each panel row is contiguous in B.
        (local.set $src (i32.add (local.get $b) (i32.shl (i32.add (i32.mul (local.get $k0) (local.get $ldb))
          (i32.add (local.get $j0) (local.get $jr))) (i32.const 2))))
        (local.set $k (i32.const 0))
        (loop $krows
          (if (i32.eq (local.get $w) (i32.const ${b.NR}))
            (then
${
    range(V).map((v) =>
      `              (v128.store offset=${v * 16} (local.get $dst) (v128.load offset=${v * 16} (local.get $src)))`
    ).join("\n")
  })
            (else
              (local.set $j (i32.const 0))
              (loop $cols
                ;; Not select: B past column w may lie past the end of the memory.
                (f32.store (i32.add (local.get $dst) (i32.shl (local.get $j) (i32.const 2)))
                  (if (result f32) (i32.lt_u (local.get $j) (local.get $w))
                    (then (f32.load (i32.add (local.get $src) (i32.shl (local.get $j) (i32.const 2)))))
                    (else (f32.const 0))))
                (local.set $j (i32.add (local.get $j) (i32.const 1)))
                (br_if $cols (i32.lt_u (local.get $j) (i32.const ${b.NR}))))))
          (local.set $src (i32.add (local.get $src) (local.get $ldbB)))
          (local.set $dst (i32.add (local.get $dst) (i32.const ${b.NR * 4})))
          (local.set $k (i32.add (local.get $k) (i32.const 1)))
          (br_if $krows (i32.lt_u (local.get $k) (local.get $kc)))))
      (else
        ;; B(k, j) at (j0+jr+j)·ldb + k0+k: each column j of the panel is a contiguous run over k in B.
        (local.set $j (i32.const 0))
        (loop $pcols
          (local.set $d (i32.add (local.get $dst) (i32.shl (local.get $j) (i32.const 2))))
          (if (i32.lt_u (local.get $j) (local.get $w))
            (then
              (local.set $src (i32.add (local.get $b) (i32.shl (i32.add (i32.mul
                (i32.add (local.get $j0) (i32.add (local.get $jr) (local.get $j))) (local.get $ldb)) (local.get $k0))
                (i32.const 2))))
              (local.set $k (i32.const 0))
              (loop $kk
                (f32.store (local.get $d) (f32.load (local.get $src)))
                (local.set $src (i32.add (local.get $src) (i32.const 4)))
                (local.set $d (i32.add (local.get $d) (i32.const ${b.NR * 4})))
                (local.set $k (i32.add (local.get $k) (i32.const 1)))
                (br_if $kk (i32.lt_u (local.get $k) (local.get $kc)))))
            (else
              (local.set $k (i32.const 0))
              (loop $kz
                (f32.store (local.get $d) (f32.const 0))
                (local.set $d (i32.add (local.get $d) (i32.const ${b.NR * 4})))
                (local.set $k (i32.add (local.get $k) (i32.const 1)))
                (br_if $kz (i32.lt_u (local.get $k) (local.get $kc))))))
          (local.set $j (i32.add (local.get $j) (i32.const 1)))
          (br_if $pcols (i32.lt_u (local.get $j) (i32.const ${b.NR}))))
        (local.set $dst (i32.add (local.get $dst) (i32.mul (local.get $kc) (i32.const ${b.NR * 4}))))))
    (local.set $jr (i32.add (local.get $jr) (i32.const ${b.NR})))
    (br_if $panels (i32.lt_u (local.get $jr) (local.get $nc))))
)`
}

/**
 * Few rows of A times Bᵀ (decoding's x·Wᵀ at batch 1 … SMALL_M): packing B would cost as much as the product, so
 * each C(m, n) is a dot product of A's row m and B's row n, both contiguous over k, 4 lanes at a time (the lanes
 * summed at the end, then the k mod 4 left). B rows are taken 4 at a time (then 1 for the last columns) and the
 * rows of A run against them two at a time while they are in cache.
 */
const dotNT = (variant: WasmVariant) => {
  const fma = (a: string, x: string, c: string) =>
    variant === "relaxed-simd" ? `(f32x4.relaxed_madd ${a} ${x} ${c})` : `(f32x4.add (f32x4.mul ${a} ${x}) ${c})`
  const get = (name: string) => `(local.get $${name})`
  // h rows of A (from m) against w rows of B (from n); every C(m, n) is summed in the same order whatever h and w.
  const block = (h: number, w: number) => {
    const is = range(h), js = range(w), id = `${h}${w}`
    const lane = (i: number, j: number, l: number) => `(f32x4.extract_lane ${l} ${get(`acc${i}_${j}`)})`
    const hsum = (i: number, j: number) =>
      `(f32.add (f32.add ${lane(i, j, 0)} ${lane(i, j, 1)}) (f32.add ${lane(i, j, 2)} ${lane(i, j, 3)}))`
    const each = (f: (i: number, j: number) => string) => is.flatMap((i) => js.map((j) => f(i, j))).join("\n")
    return `
      (local.set $pa0 (i32.add (local.get $a) (i32.shl (i32.mul (local.get $m) (local.get $lda)) (i32.const 2))))
      (local.set $pa1 (i32.add (local.get $pa0) (i32.shl (local.get $lda) (i32.const 2))))
${each((i, j) => `      (local.set $acc${i}_${j} (v128.const i32x4 0 0 0 0))`)}
      (local.set $k (i32.const 0))
      (if (i32.gt_u (local.get $k4) (i32.const 0)) (then
        (loop $k${id}
${is.map((i) => `          (local.set $va${i} (v128.load (i32.add (local.get $pa${i}) (local.get $k))))`).join("\n")}
${
      js.map((j) =>
        [
          `          (local.set $vb (v128.load (i32.add (local.get $pb${j}) (local.get $k))))`,
          ...is.map((i) => `          (local.set $acc${i}_${j} ${fma(get(`va${i}`), get("vb"), get(`acc${i}_${j}`))})`)
        ].join("\n")
      ).join("\n")
    }
          (local.set $k (i32.add (local.get $k) (i32.const 16)))
          (br_if $k${id} (i32.lt_u (local.get $k) (local.get $k4))))))
${each((i, j) => `      (local.set $s${i}_${j} ${hsum(i, j)})`)}
      (if (i32.lt_u (local.get $k) (local.get $kB)) (then
        (loop $t${id}
${is.map((i) => `          (local.set $x${i} (f32.load (i32.add (local.get $pa${i}) (local.get $k))))`).join("\n")}
${
      js.map((j) =>
        [
          `          (local.set $y (f32.load (i32.add (local.get $pb${j}) (local.get $k))))`,
          ...is.map((i) =>
            `          (local.set $s${i}_${j} (f32.add ${get(`s${i}_${j}`)} (f32.mul ${get(`x${i}`)} (local.get $y))))`
          )
        ].join("\n")
      ).join("\n")
    }
          (local.set $k (i32.add (local.get $k) (i32.const 4)))
          (br_if $t${id} (i32.lt_u (local.get $k) (local.get $kB))))))
${
      is.map((i) =>
        [
          `      (local.set $pc (i32.add (local.get $c) (i32.shl (i32.add (i32.mul (i32.add (local.get $m) (i32.const ${i}))`,
          `        (local.get $ldc)) (local.get $n)) (i32.const 2))))`,
          ...js.map((j) =>
            `      (f32.store offset=${j * 4} (local.get $pc) (f32.add (f32.mul (local.get $alpha) ${get(`s${i}_${j}`)})
        (select (f32.mul (local.get $beta) (f32.load offset=${j * 4} (local.get $pc))) (f32.const 0)
          (f32.ne (local.get $beta) (f32.const 0)))))`
          )
        ].join("\n")
      ).join("\n")
    }`
  }
  // Rows two at a time (each B vector loaded once for both), then the odd one.
  const rows = (w: number) => `
      (local.set $m (i32.const 0))
      (block $rdone${w}
        (loop $rows${w}
          (br_if $rdone${w} (i32.gt_u (i32.add (local.get $m) (i32.const 2)) (local.get $M)))
${block(2, w)}
          (local.set $m (i32.add (local.get $m) (i32.const 2)))
          (br $rows${w})))
      (if (i32.lt_u (local.get $m) (local.get $M)) (then
${block(1, w)}))`
  const accs = range(2).flatMap((i) => range(4).map((j) => `${i}_${j}`))
  return `(func $dotNT (param $M i32) (param $N i32) (param $K i32) (param $alpha f32) (param $a i32) (param $lda i32)
  (param $b i32) (param $ldb i32) (param $beta f32) (param $c i32) (param $ldc i32)
  (local $n i32) (local $m i32) (local $k i32) (local $k4 i32) (local $kB i32) (local $pa0 i32) (local $pa1 i32)
  (local $pc i32) (local $pb0 i32) (local $pb1 i32) (local $pb2 i32) (local $pb3 i32)
  (local $va0 v128) (local $va1 v128) (local $vb v128) (local $x0 f32) (local $x1 f32) (local $y f32)
  ${accs.map((a) => `(local $acc${a} v128)`).join(" ")}
  ${accs.map((a) => `(local $s${a} f32)`).join(" ")}
  ;; k offsets in bytes: k4 = whole vectors, kB = all of K.
  (local.set $kB (i32.shl (local.get $K) (i32.const 2)))
  (local.set $k4 (i32.shl (i32.and (local.get $K) (i32.const -4)) (i32.const 2)))
  (local.set $n (i32.const 0))
  (block $done4
    (loop $cols4
      (br_if $done4 (i32.gt_u (i32.add (local.get $n) (i32.const 4)) (local.get $N)))
${
    range(4).map((j) =>
      `      (local.set $pb${j} (i32.add (local.get $b) (i32.shl (i32.mul (i32.add (local.get $n) (i32.const ${j})) (local.get $ldb)) (i32.const 2))))`
    ).join("\n")
  }
${rows(4)}
      (local.set $n (i32.add (local.get $n) (i32.const 4)))
      (br $cols4)))
  (block $done1
    (loop $cols1
      (br_if $done1 (i32.ge_u (local.get $n) (local.get $N)))
      (local.set $pb0 (i32.add (local.get $b) (i32.shl (i32.mul (local.get $n) (local.get $ldb)) (i32.const 2))))
${rows(1)}
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br $cols1)))
)`
}

/** Packs transposed A's (mc × kc) block at rows i0, depth k0 into MR-row panels at dst: panel p holds, for each k,
 * A(i0+p·MR … +MR-1, k0+k) = a[(k0+k)·lda + i0+p·MR+r], zero-padded past row mc. */
const packA = (b: Blocking) => {
  if (b.MR % 4 !== 0) throw new Error("sgemmWat: packA copies whole vectors, so MR must be a multiple of 4")
  return `(func $packA (param $a i32) (param $lda i32) (param $i0 i32) (param $k0 i32) (param $mc i32) (param $kc i32)
  (param $dst i32)
  (local $ir i32) (local $w i32) (local $k i32) (local $r i32) (local $src i32) (local $ldaB i32)
  (local.set $ldaB (i32.shl (local.get $lda) (i32.const 2)))
  (local.set $ir (i32.const 0))
  (loop $panels
    (local.set $w (select (i32.sub (local.get $mc) (local.get $ir)) (i32.const ${b.MR})
      (i32.lt_u (i32.sub (local.get $mc) (local.get $ir)) (i32.const ${b.MR}))))
    (local.set $src (i32.add (local.get $a) (i32.shl (i32.add (i32.mul (local.get $k0) (local.get $lda))
      (i32.add (local.get $i0) (local.get $ir))) (i32.const 2))))
    (local.set $k (i32.const 0))
    (loop $ks
      (if (i32.eq (local.get $w) (i32.const ${b.MR}))
        (then
${
    range(b.MR / 4).map((v) =>
      `          (v128.store offset=${v * 16} (local.get $dst) (v128.load offset=${v * 16} (local.get $src)))`
    ).join("\n")
  })
        (else
          (local.set $r (i32.const 0))
          (loop $rows
            ;; Not select: A past row w may lie past the end of the memory.
            (f32.store (i32.add (local.get $dst) (i32.shl (local.get $r) (i32.const 2)))
              (if (result f32) (i32.lt_u (local.get $r) (local.get $w))
                (then (f32.load (i32.add (local.get $src) (i32.shl (local.get $r) (i32.const 2)))))
                (else (f32.const 0))))
            (local.set $r (i32.add (local.get $r) (i32.const 1)))
            (br_if $rows (i32.lt_u (local.get $r) (i32.const ${b.MR}))))))
      (local.set $src (i32.add (local.get $src) (local.get $ldaB)))
      (local.set $dst (i32.add (local.get $dst) (i32.const ${b.MR * 4})))
      (local.set $k (i32.add (local.get $k) (i32.const 1)))
      (br_if $ks (i32.lt_u (local.get $k) (local.get $kc))))
    (local.set $ir (i32.add (local.get $ir) (i32.const ${b.MR})))
    (br_if $panels (i32.lt_u (local.get $ir) (local.get $mc))))
)`
}

/** The exported driver: the loop nest over NC, KC, MC, NR, MR blocks (M, N, K ≥ 1; the loader checks). */
const driver = (b: Blocking) => {
  const call = (family: "N" | "T") => {
    // Full-height blocks first: only the last row block of a matrix is shorter than MR.
    const args =
      `(local.get $pa) (local.get $rs) (local.get $ks) (local.get $pb) (local.get $kc) (local.get $pcC) (local.get $ldcB) (local.get $alpha) (local.get $betaE) (local.get $nr) (local.get $work)`
    let s = `(call $k${family}1 ${args})`
    for (const mr of range(b.MR - 1).map((i) => i + 2)) {
      s = `(if (i32.eq (local.get $mr) (i32.const ${mr})) (then (call $k${family}${mr} ${args})) (else ${s}))`
    }
    return s
  }
  return `(func (export "sgemm") (param $ta i32) (param $tb i32) (param $M i32) (param $N i32) (param $K i32)
  (param $alpha f32) (param $a i32) (param $lda i32) (param $b i32) (param $ldb i32) (param $beta f32) (param $c i32)
  (param $ldc i32) (param $work i32)
  (local $rs i32) (local $ks i32) (local $ldcB i32) (local $bpack i32) (local $jc i32) (local $nc i32) (local $p0 i32)
  (local $kc i32) (local $betaE f32) (local $ic i32) (local $mc i32) (local $jr i32) (local $nr i32) (local $pb i32)
  (local $ir i32) (local $mr i32) (local $pa i32) (local $pcC i32) (local $apack i32)
  (if (i32.and (i32.eqz (local.get $ta)) (i32.and (local.get $tb) (i32.le_u (local.get $M) (i32.const ${SMALL_M}))))
    (then
      (call $dotNT (local.get $M) (local.get $N) (local.get $K) (local.get $alpha) (local.get $a) (local.get $lda)
        (local.get $b) (local.get $ldb) (local.get $beta) (local.get $c) (local.get $ldc))
      (return)))
  (local.set $rs (select (i32.const 4) (i32.shl (local.get $lda) (i32.const 2)) (local.get $ta)))
  ;; Transposed A is read from its packed panels: k at +MR·4 bytes.
  (local.set $ks (select (i32.const ${b.MR * 4}) (i32.const 4) (local.get $ta)))
  (local.set $ldcB (i32.shl (local.get $ldc) (i32.const 2)))
  (local.set $apack (i32.add (local.get $work) (i32.const ${b.MR * b.NR * 4})))
  (local.set $bpack (i32.add (local.get $apack) (i32.const ${b.MC * b.KC * 4})))
  (local.set $jc (i32.const 0))
  (loop $ljc
    (local.set $nc (select (i32.const ${b.NC}) (i32.sub (local.get $N) (local.get $jc))
      (i32.gt_u (i32.sub (local.get $N) (local.get $jc)) (i32.const ${b.NC}))))
    (local.set $p0 (i32.const 0))
    (loop $lpc
      (local.set $kc (select (i32.const ${b.KC}) (i32.sub (local.get $K) (local.get $p0))
        (i32.gt_u (i32.sub (local.get $K) (local.get $p0)) (i32.const ${b.KC}))))
      (local.set $betaE (select (local.get $beta) (f32.const 1) (i32.eqz (local.get $p0))))
      (call $packB (local.get $tb) (local.get $b) (local.get $ldb) (local.get $p0) (local.get $jc) (local.get $kc)
        (local.get $nc) (local.get $bpack))
      (local.set $ic (i32.const 0))
      (loop $lic
        (local.set $mc (select (i32.const ${b.MC}) (i32.sub (local.get $M) (local.get $ic))
          (i32.gt_u (i32.sub (local.get $M) (local.get $ic)) (i32.const ${b.MC}))))
        (if (local.get $ta) (then
          (call $packA (local.get $a) (local.get $lda) (local.get $ic) (local.get $p0) (local.get $mc) (local.get $kc)
            (local.get $apack))))
        (local.set $jr (i32.const 0))
        (loop $ljr
          (local.set $nr (select (i32.const ${b.NR}) (i32.sub (local.get $nc) (local.get $jr))
            (i32.gt_u (i32.sub (local.get $nc) (local.get $jr)) (i32.const ${b.NR}))))
          ;; Panel jr/NR of the packed block starts at (jr/NR)·kc·NR floats = jr·kc floats.
          (local.set $pb (i32.add (local.get $bpack) (i32.shl (i32.mul (local.get $jr) (local.get $kc)) (i32.const 2))))
          (local.set $ir (local.get $ic))
          (loop $lir
            (local.set $mr (select (i32.const ${b.MR}) (i32.sub (i32.add (local.get $ic) (local.get $mc)) (local.get $ir))
              (i32.gt_u (i32.sub (i32.add (local.get $ic) (local.get $mc)) (local.get $ir)) (i32.const ${b.MR}))))
            (local.set $pa (select
              (i32.add (local.get $apack) (i32.shl (i32.mul (i32.sub (local.get $ir) (local.get $ic)) (local.get $kc))
                (i32.const 2)))
              (i32.add (local.get $a) (i32.add (i32.mul (local.get $ir) (local.get $rs)) (i32.shl (local.get $p0) (i32.const 2))))
              (local.get $ta)))
            (local.set $pcC (i32.add (local.get $c) (i32.add (i32.mul (local.get $ir) (local.get $ldcB))
              (i32.shl (i32.add (local.get $jc) (local.get $jr)) (i32.const 2)))))
            (if (local.get $ta)
              (then ${call("T")})
              (else ${call("N")}))
            (local.set $ir (i32.add (local.get $ir) (i32.const ${b.MR})))
            (br_if $lir (i32.lt_u (local.get $ir) (i32.add (local.get $ic) (local.get $mc)))))
          (local.set $jr (i32.add (local.get $jr) (i32.const ${b.NR})))
          (br_if $ljr (i32.lt_u (local.get $jr) (local.get $nc))))
        (local.set $ic (i32.add (local.get $ic) (i32.const ${b.MC})))
        (br_if $lic (i32.lt_u (local.get $ic) (local.get $M))))
      (local.set $p0 (i32.add (local.get $p0) (i32.const ${b.KC})))
      (br_if $lpc (i32.lt_u (local.get $p0) (local.get $K))))
    (local.set $jc (i32.add (local.get $jc) (i32.const ${b.NC})))
    (br_if $ljc (i32.lt_u (local.get $jc) (local.get $N))))
)`
}

/** The whole module's text. The memory is imported and shared, so views handed out before a `grow` stay valid. */
export const sgemmWat = (variant: WasmVariant, b: Blocking = blocking): string =>
  [
    `;; Generated by packages/gpu/src/cpu/internal/sgemmWat.ts (${variant}, MR=${b.MR} NR=${b.NR} KC=${b.KC} MC=${b.MC} NC=${b.NC} U=${b.U}).`,
    `(module`,
    `(import "env" "memory" (memory 1 65536 shared))`,
    ...(["N", "T"] as const).flatMap((family) => range(b.MR).map((i) => kernel(b, variant, family, i + 1))),
    packB(b),
    packA(b),
    dotNT(variant),
    driver(b),
    `)`
  ].join("\n")
