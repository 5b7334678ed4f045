/**
 * NaN-aware reductions with torch semantics (TRL's `nanmean`, `nanstd`, `nanmin`, `nanmax`).
 */

/** Mean of the non-NaN values; NaN when there are none (torch.nanmean). */
export const nanmean = (xs: ArrayLike<number>, from = 0, to = xs.length): number => {
  let sum = 0
  let count = 0
  for (let i = from; i < to; i++) {
    const x = xs[i]
    if (!Number.isNaN(x)) {
      sum += x
      count++
    }
  }
  return count === 0 ? NaN : sum / count
}

/** Bessel-corrected std of the non-NaN values; NaN when fewer than two (TRL's `nanstd`). */
export const nanstd = (xs: ArrayLike<number>, from = 0, to = xs.length): number => {
  const mean = nanmean(xs, from, to)
  let sq = 0
  let count = 0
  for (let i = from; i < to; i++) {
    const x = xs[i]
    if (!Number.isNaN(x)) {
      sq += (x - mean) * (x - mean)
      count++
    }
  }
  return count > 1 ? Math.sqrt(sq / (count - 1)) : NaN
}

/** Minimum ignoring NaN; NaN when all are NaN. */
export const nanmin = (xs: ArrayLike<number>): number => {
  let best = NaN
  for (let i = 0; i < xs.length; i++) if (!Number.isNaN(xs[i]) && !(xs[i] >= best)) best = xs[i]
  return best
}

/** Maximum ignoring NaN; NaN when all are NaN. */
export const nanmax = (xs: ArrayLike<number>): number => {
  let best = NaN
  for (let i = 0; i < xs.length; i++) if (!Number.isNaN(xs[i]) && !(xs[i] <= best)) best = xs[i]
  return best
}

/** torch.isclose(x, 0) with default tolerances (rtol 1e-5, atol 1e-8); NaN is never close. */
export const isCloseToZero = (x: number): boolean => Math.abs(x) <= 1e-8

/** torch.quantile with linear interpolation over a non-empty list. */
export const quantile = (values: Array<number>, q: number): number => {
  const sorted = values.slice().sort((a, b) => a - b)
  const pos = q * (sorted.length - 1)
  const lo = Math.floor(pos)
  const hi = Math.ceil(pos)
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo)
}
