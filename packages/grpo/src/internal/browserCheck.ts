/**
 * Renders an HTML file in a real headless Chromium and checks that the page rendered: the DOM after scripts ran
 * (`--dump-dom`) carries the report's `data-rendered` chart count and its chart elements, and the screenshot is
 * not blank. Used by the report test (skipped without Chromium) and `bench/grpo/report-check.ts`.
 */
import { Effect } from "effect"
import { execFile } from "node:child_process"
import { existsSync, readFileSync } from "node:fs"
import { inflateSync } from "node:zlib"

export const chromiumPath = (): string | undefined =>
  ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"].find((p) => existsSync(p))

const run = (bin: string, args: ReadonlyArray<string>) =>
  Effect.async<string, Error>((resume) => {
    const child = execFile(bin, [...args], { timeout: 60_000, maxBuffer: 64 * 1024 * 1024 }, (error, stdout) => {
      if (error !== null) resume(Effect.fail(new Error(`${bin} failed: ${error.message}`)))
      else resume(Effect.succeed(stdout))
    })
    return Effect.sync(() => void child.kill())
  })

const baseArgs = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--allow-file-access-from-files"]

/** Counts the pixels of an 8-bit RGB/RGBA PNG that differ from its top-left pixel, and the distinct colours. */
export const pngStats = (
  png: Uint8Array
): { width: number; height: number; nonBackground: number; colours: number } => {
  const view = new DataView(png.buffer, png.byteOffset, png.byteLength)
  let offset = 8
  let width = 0
  let height = 0
  let colourType = 0
  let bitDepth = 0
  const idat: Array<Uint8Array> = []
  while (offset < png.length) {
    const length = view.getUint32(offset)
    const type = String.fromCharCode(...png.subarray(offset + 4, offset + 8))
    const data = png.subarray(offset + 8, offset + 8 + length)
    if (type === "IHDR") {
      width = view.getUint32(offset + 8)
      height = view.getUint32(offset + 12)
      bitDepth = data[8]
      colourType = data[9]
    } else if (type === "IDAT") idat.push(data)
    offset += 12 + length
  }
  if (bitDepth !== 8 || (colourType !== 2 && colourType !== 6)) {
    throw new Error(`unsupported PNG (bit depth ${bitDepth}, colour type ${colourType})`)
  }
  const bpp = colourType === 6 ? 4 : 3
  const raw = inflateSync(Buffer.concat(idat))
  const stride = width * bpp
  const pixels = new Uint8Array(height * stride)
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)]
    for (let x = 0; x < stride; x++) {
      const v = raw[y * (stride + 1) + 1 + x]
      const a = x >= bpp ? pixels[y * stride + x - bpp] : 0
      const b = y > 0 ? pixels[(y - 1) * stride + x] : 0
      const c = x >= bpp && y > 0 ? pixels[(y - 1) * stride + x - bpp] : 0
      let p = 0
      if (filter === 1) p = a
      else if (filter === 2) p = b
      else if (filter === 3) p = (a + b) >> 1
      else if (filter === 4) {
        const e = a + b - c
        const pa = Math.abs(e - a)
        const pb = Math.abs(e - b)
        const pc = Math.abs(e - c)
        p = pa <= pb && pa <= pc ? a : pb <= pc ? b : c
      }
      pixels[y * stride + x] = (v + p) & 0xff
    }
  }
  const colours = new Set<number>()
  let nonBackground = 0
  const bg = (pixels[0] << 16) | (pixels[1] << 8) | pixels[2]
  for (let i = 0; i < width * height; i++) {
    const rgb = (pixels[i * bpp] << 16) | (pixels[i * bpp + 1] << 8) | pixels[i * bpp + 2]
    if (colours.size < 4096) colours.add(rgb)
    if (rgb !== bg) nonBackground++
  }
  return { width, height, nonBackground, colours: colours.size }
}

export interface BrowserCheck {
  readonly chromium: string
  readonly renderedCharts: number
  readonly svgCharts: number
  readonly screenshot: { width: number; height: number; nonBackground: number; colours: number }
}

/** Loads `htmlPath` in headless Chromium; fails if it did not render (the script did not run, or a blank page). */
export const check = (htmlPath: string, screenshotPath: string) =>
  Effect.gen(function*() {
    const chromium = chromiumPath()
    if (chromium === undefined) return yield* Effect.fail(new Error("Chromium is not installed (/usr/bin/chromium)"))
    const url = `file://${htmlPath}`
    const dom = yield* run(chromium, [...baseArgs, "--virtual-time-budget=2000", "--dump-dom", url])
    const rendered = /<body[^>]*data-rendered="(\d+)"/.exec(dom)
    const renderedCharts = rendered === null ? 0 : Number(rendered[1])
    const svgCharts = (dom.match(/<svg class="chart"/g) ?? []).length
    yield* run(chromium, [...baseArgs, "--window-size=1280,1600", `--screenshot=${screenshotPath}`, url])
    const screenshot = pngStats(readFileSync(screenshotPath))
    if (renderedCharts === 0 || renderedCharts !== svgCharts) {
      return yield* Effect.fail(
        new Error(`the report's script did not run to the end (data-rendered=${renderedCharts}, ${svgCharts} charts)`)
      )
    }
    if (screenshot.nonBackground < 1000 || screenshot.colours < 8) {
      return yield* Effect.fail(new Error(`the screenshot looks blank (${JSON.stringify(screenshot)})`))
    }
    return { chromium, renderedCharts, svgCharts, screenshot } satisfies BrowserCheck
  })
