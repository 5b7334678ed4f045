/**
 * Decodes the PNGs Chromium writes for screenshots (8-bit RGB or RGBA, not interlaced) into BrowserGym's screenshot
 * shape: rows of `[r, g, b]` pixels.
 */
import { inflateSync } from "node:zlib"

const paeth = (a: number, b: number, c: number) => {
  const p = a + b - c
  const pa = Math.abs(p - a)
  const pb = Math.abs(p - b)
  const pc = Math.abs(p - c)
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c
}

export const decodeRgb = (png: Buffer): Array<Array<[number, number, number]>> => {
  let pos = 8
  let width = 0
  let height = 0
  let colorType = 0
  const idat: Array<Buffer> = []
  while (pos < png.length) {
    const length = png.readUInt32BE(pos)
    const type = png.toString("latin1", pos + 4, pos + 8)
    const data = png.subarray(pos + 8, pos + 8 + length)
    if (type === "IHDR") {
      width = data.readUInt32BE(0)
      height = data.readUInt32BE(4)
      if (data[8] !== 8 || data[12] !== 0) throw new Error("only 8-bit, non-interlaced PNGs are decoded")
      colorType = data[9]
    } else if (type === "IDAT") idat.push(data)
    else if (type === "IEND") break
    pos += 12 + length
  }
  const channels = colorType === 6 ? 4 : colorType === 2 ? 3 : 0
  if (channels === 0) throw new Error(`PNG colour type ${colorType} is not decoded (RGB or RGBA only)`)
  const raw = inflateSync(Buffer.concat(idat))
  const stride = width * channels
  const out: Array<Array<[number, number, number]>> = []
  let prev = new Uint8Array(stride)
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)]
    const line = new Uint8Array(raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1)))
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? line[x - channels] : 0
      const b = prev[x]
      const c = x >= channels ? prev[x - channels] : 0
      const add = filter === 1 ? a : filter === 2 ? b : filter === 3 ? (a + b) >> 1 : filter === 4 ? paeth(a, b, c) : 0
      line[x] = (line[x] + add) & 0xff
    }
    const row: Array<[number, number, number]> = []
    for (let x = 0; x < width; x++) row.push([line[x * channels], line[x * channels + 1], line[x * channels + 2]])
    out.push(row)
    prev = line
  }
  return out
}
