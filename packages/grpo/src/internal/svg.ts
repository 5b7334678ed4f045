/**
 * Inline SVG line charts for the HTML report: no library, no network, text only.
 */

export interface Series {
  readonly name: string
  readonly points: ReadonlyArray<readonly [number, number]>
}

export const escapeHtml = (s: string): string =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;")

const palette = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"]

/** A short, readable number for axis labels. */
export const formatNumber = (x: number): string => {
  if (x === 0) return "0"
  const a = Math.abs(x)
  if (a >= 1e4 || a < 1e-3) return x.toExponential(1)
  if (a >= 100) return x.toFixed(0)
  if (a >= 1) return x.toFixed(2).replace(/\.?0+$/, "")
  return x.toPrecision(2)
}

const niceTicks = (lo: number, hi: number, count: number): Array<number> => {
  const span = hi - lo
  const raw = span / Math.max(1, count)
  const mag = Math.pow(10, Math.floor(Math.log10(raw)))
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => span / s <= count) ?? 10 * mag
  const out: Array<number> = []
  // Integer multiples of the step, so accumulated float error never prints as -1.4e-17.
  for (let k = Math.ceil(lo / step); k * step <= hi + step * 1e-9; k++) {
    out.push(k === 0 ? 0 : Number((k * step).toPrecision(12)))
  }
  return out
}

/**
 * One line chart. Points with non-finite values are skipped (a gap in the data, not a zero). With no data the
 * chart says so instead of drawing empty axes.
 */
export const lineChart = (id: string, title: string, series: ReadonlyArray<Series>): string => {
  const W = 520
  const H = 240
  const m = { top: 28, right: 12, bottom: 30, left: 56 }
  const all = series.flatMap((s) => s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y)))
  const head = `<svg class="chart" id="${escapeHtml(id)}" data-metric="${escapeHtml(id)}" viewBox="0 0 ${W} ${H}" ` +
    `width="${W}" height="${H}" role="img" aria-label="${escapeHtml(title)}" xmlns="http://www.w3.org/2000/svg">` +
    `<text x="${m.left}" y="18" class="chart-title">${escapeHtml(title)}</text>`
  if (all.length === 0) {
    return `${head}<text x="${W / 2}" y="${H / 2}" text-anchor="middle" class="empty">no data yet</text></svg>`
  }
  let x0 = Math.min(...all.map((p) => p[0]))
  let x1 = Math.max(...all.map((p) => p[0]))
  let y0 = Math.min(...all.map((p) => p[1]))
  let y1 = Math.max(...all.map((p) => p[1]))
  if (x0 === x1) {
    x0 -= 1
    x1 += 1
  }
  if (y0 === y1) {
    const pad = Math.abs(y0) > 0 ? Math.abs(y0) * 0.1 : 1
    y0 -= pad
    y1 += pad
  }
  const px = (x: number) => m.left + ((x - x0) / (x1 - x0)) * (W - m.left - m.right)
  const py = (y: number) => H - m.bottom - ((y - y0) / (y1 - y0)) * (H - m.top - m.bottom)
  const parts: Array<string> = [head]
  for (const t of niceTicks(y0, y1, 4)) {
    parts.push(
      `<line x1="${m.left}" x2="${W - m.right}" y1="${py(t).toFixed(1)}" y2="${py(t).toFixed(1)}" class="grid"/>`,
      `<text x="${m.left - 6}" y="${(py(t) + 4).toFixed(1)}" text-anchor="end" class="tick">${formatNumber(t)}</text>`
    )
  }
  for (const t of niceTicks(x0, x1, 6)) {
    parts.push(
      `<text x="${px(t).toFixed(1)}" y="${H - m.bottom + 16}" text-anchor="middle" class="tick">${
        formatNumber(t)
      }</text>`
    )
  }
  parts.push(
    `<line x1="${m.left}" x2="${m.left}" y1="${m.top}" y2="${H - m.bottom}" class="axis"/>`,
    `<line x1="${m.left}" x2="${W - m.right}" y1="${H - m.bottom}" y2="${H - m.bottom}" class="axis"/>`,
    `<text x="${W - m.right}" y="${H - 4}" text-anchor="end" class="tick">step</text>`
  )
  series.forEach((s, i) => {
    const color = palette[i % palette.length]
    const pts = s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y))
    const path = pts.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(" ")
    parts.push(
      `<g class="series" data-series="${escapeHtml(s.name)}">`,
      `<polyline fill="none" stroke="${color}" stroke-width="1.8" points="${path}"/>`,
      ...pts.map(([x, y]) =>
        `<circle cx="${px(x).toFixed(1)}" cy="${py(y).toFixed(1)}" r="2.4" fill="${color}"><title>${
          escapeHtml(s.name)
        } @ step ${x}: ${formatNumber(y)}</title></circle>`
      ),
      `</g>`
    )
    if (series.length > 1 || s.name !== title) {
      const lx = m.left + 8 + (i % 3) * 150
      const ly = m.top + 12 + Math.floor(i / 3) * 14
      parts.push(
        `<g class="legend" data-series="${escapeHtml(s.name)}"><rect x="${lx}" y="${ly - 8}" width="10" height="10" ` +
          `fill="${color}"/><text x="${lx + 14}" y="${ly + 1}" class="tick">${escapeHtml(s.name)}</text></g>`
      )
    }
  })
  parts.push(`</svg>`)
  return parts.join("")
}
