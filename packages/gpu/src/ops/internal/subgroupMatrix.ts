/**
 * The subgroup-matrix matmul kernel (Dawn's chromium-experimental-subgroup-matrix: tensor cores on NVIDIA,
 * simdgroup matrices on Apple). Untested on hardware: no adapter this project has run on offers the feature.
 *
 * One workgroup is one subgroup (`workgroup_size` = the adapter's maximum subgroup size, as the extension
 * requires) and owns an (rm·M)×(rn·N) tile of C. Per K step it stages zero-padded f16 tiles of A ([TM][TK]) and
 * B ([TK][TN]) in workgroup memory (reading either layout of each operand, so transposes cost nothing), loads
 * M×K / K×N fragments from there and multiply-accumulates rm·rn f32 result matrices. The results go through a
 * workgroup f32 tile so that the epilogue (alpha, beta·C, bias) and the ragged edges are handled per element.
 * Every offset, stride and loop bound is workgroup-uniform, as the extension's uniformity rule demands.
 */

/** The configuration and geometry a kernel is generated for. */
export interface SubgroupMatrixShape {
  /** One supported configuration of the adapter (f16 × f16 → f32). */
  readonly m: number
  readonly n: number
  readonly k: number
  /** Threads per workgroup: the adapter's maximum subgroup size. */
  readonly subgroupSize: number
  /** Result matrices per workgroup along M and N (default 2 × 2). */
  readonly rm?: number
  readonly rn?: number
}

/** The workgroup tile of C, for the dispatch grid. */
export const tileOf = (s: SubgroupMatrixShape) => ({ tm: s.m * (s.rm ?? 2), tn: s.n * (s.rn ?? 2), tk: s.k * 2 })

/** WGSL of C = alpha·op(A)·op(B) (+ beta·C) (+ bias) with f16 A and B, f32 C; the same parameters as the tiled kernels. */
export const matmulSubgroupMatrix = (
  o: { readonly transA: boolean; readonly transB: boolean; readonly bias: boolean },
  s: SubgroupMatrixShape
) => {
  const rm = s.rm ?? 2
  const rn = s.rn ?? 2
  const { tk: TK, tm: TM, tn: TN } = tileOf(s)
  const SG = s.subgroupSize
  const left = `subgroup_matrix_left<f16, ${s.k}, ${s.m}>`
  const right = `subgroup_matrix_right<f16, ${s.n}, ${s.k}>`
  const result = `subgroup_matrix_result<f32, ${s.n}, ${s.m}>`
  // Index orders chosen so that neighbouring threads read neighbouring global addresses in each layout.
  const stageA = o.transA
    ? `let kk = e / ${TM}u; let r = e % ${TM}u; let gr = row0 + r; let gk = k0 + kk;
      var v = 0.0h; if (gr < p.m && gk < p.k) { v = A[p.aOff + gk * p.lda + gr]; }`
    : `let r = e / ${TK}u; let kk = e % ${TK}u; let gr = row0 + r; let gk = k0 + kk;
      var v = 0.0h; if (gr < p.m && gk < p.k) { v = A[p.aOff + gr * p.lda + gk]; }`
  const stageB = o.transB
    ? `let c = e / ${TK}u; let kk = e % ${TK}u; let gc = col0 + c; let gk = k0 + kk;
      var w = 0.0h; if (gc < p.n && gk < p.k) { w = B[p.bOff + gc * p.ldb + gk]; }`
    : `let kk = e / ${TN}u; let c = e % ${TN}u; let gc = col0 + c; let gk = k0 + kk;
      var w = 0.0h; if (gc < p.n && gk < p.k) { w = B[p.bOff + gk * p.ldb + gc]; }`
  const bias = o.bias ? "\n@group(0) @binding(4) var<storage, read> Bias: array<f32>;" : ""
  return `enable f16;
enable chromium_experimental_subgroup_matrix;
struct P { m: u32, n: u32, k: u32, aOff: u32, bOff: u32, cOff: u32, biasOff: u32, alpha: f32, beta: f32, lda: u32, ldb: u32, ldc: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> A: array<f16>;
@group(0) @binding(2) var<storage, read> B: array<f16>;
@group(0) @binding(3) var<storage, read_write> C: array<f32>;${bias}
var<workgroup> As: array<f16, ${TM * TK}>; // [TM][TK]
var<workgroup> Bs: array<f16, ${TK * TN}>; // [TK][TN]
var<workgroup> Cs: array<f32, ${TM * TN}>; // [TM][TN]
@compute @workgroup_size(${SG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u) {
  let row0 = wid.y * ${TM}u;
  let col0 = wid.x * ${TN}u;
  var acc: array<${result}, ${rm * rn}>;
  for (var k0 = 0u; k0 < p.k; k0 += ${TK}u) {
    for (var e = lid; e < ${TM * TK}u; e += ${SG}u) {
      ${stageA}
      As[r * ${TK}u + kk] = v;
    }
    for (var e = lid; e < ${TK * TN}u; e += ${SG}u) {
      ${stageB}
      Bs[kk * ${TN}u + c] = w;
    }
    workgroupBarrier();
    for (var kk = 0u; kk < ${TK}u; kk += ${s.k}u) {
      for (var i = 0u; i < ${rm}u; i++) {
        let a = subgroupMatrixLoad<${left}>(&As, i * ${s.m * TK}u + kk, false, ${TK}u);
        for (var j = 0u; j < ${rn}u; j++) {
          let b = subgroupMatrixLoad<${right}>(&Bs, kk * ${TN}u + j * ${s.n}u, false, ${TN}u);
          acc[i * ${rn}u + j] = subgroupMatrixMultiplyAccumulate(a, b, acc[i * ${rn}u + j]);
        }
      }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < ${rm}u; i++) {
    for (var j = 0u; j < ${rn}u; j++) {
      subgroupMatrixStore(&Cs, i * ${s.m * TN}u + j * ${s.n}u, acc[i * ${rn}u + j], false, ${TN}u);
    }
  }
  workgroupBarrier();
  for (var e = lid; e < ${TM * TN}u; e += ${SG}u) {
    let r = row0 + e / ${TN}u;
    let c = col0 + e % ${TN}u;
    if (r < p.m && c < p.n) {
      let at = p.cOff + r * p.ldc + c;
      var v = p.alpha * Cs[e];
      if (p.beta != 0.0) { v += p.beta * C[at]; }
      ${o.bias ? "v += Bias[p.biasOff + c];" : ""}
      C[at] = v;
    }
  }
}`
}
