/**
 * TensorBoard's event files, written without TensorFlow: TFRecord framing (a little-endian u64 length, its masked
 * CRC-32C, the bytes, their masked CRC-32C) around `Event` protobufs (`tensorflow/core/util/event.proto`): the first
 * carries `file_version: "brain.Event:2"`, each later one a `Summary` of scalar values (`simple_value`, which
 * TensorBoard reads as its scalars plugin's data).
 */

/** CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord uses. */
const table = (() => {
  const t = new Uint32Array(256)
  for (let i = 0; i < 256; i++) {
    let c = i
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1
    t[i] = c >>> 0
  }
  return t
})()

export const crc32c = (bytes: Uint8Array): number => {
  let c = 0xffffffff
  for (let i = 0; i < bytes.length; i++) c = table[(c ^ bytes[i]) & 0xff] ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}

/** TFRecord's masking: rotate right by 15 and add a constant, so a CRC of data holding CRCs stays strong. */
export const maskedCrc32c = (bytes: Uint8Array): number => {
  const c = crc32c(bytes)
  return ((((c >>> 15) | (c << 17)) >>> 0) + 0xa282ead8) >>> 0
}

/** One TFRecord: length, masked CRC of the length, data, masked CRC of the data. */
export const record = (data: Uint8Array): Uint8Array => {
  const out = new Uint8Array(8 + 4 + data.length + 4)
  const view = new DataView(out.buffer)
  view.setBigUint64(0, BigInt(data.length), true)
  view.setUint32(8, maskedCrc32c(out.subarray(0, 8)), true)
  out.set(data, 12)
  view.setUint32(12 + data.length, maskedCrc32c(data), true)
  return out
}

// --- protobuf encoding (only what Event and Summary need) ---

const varint = (value: bigint | number): Array<number> => {
  let v = BigInt(value)
  if (v < 0n) v += 1n << 64n // int64 two's complement, as protobuf encodes negative varints
  const out: Array<number> = []
  do {
    let byte = Number(v & 0x7fn)
    v >>= 7n
    if (v !== 0n) byte |= 0x80
    out.push(byte)
  } while (v !== 0n)
  return out
}

const tag = (field: number, wire: number) => varint((field << 3) | wire)

const lengthDelimited = (field: number, bytes: Uint8Array): Array<number> => [
  ...tag(field, 2),
  ...varint(bytes.length),
  ...bytes
]

const double = (field: number, value: number): Array<number> => {
  const b = new Uint8Array(8)
  new DataView(b.buffer).setFloat64(0, value, true)
  return [...tag(field, 1), ...b]
}

const float = (field: number, value: number): Array<number> => {
  const b = new Uint8Array(4)
  new DataView(b.buffer).setFloat32(0, value, true)
  return [...tag(field, 5), ...b]
}

const utf8 = new TextEncoder()

/** `Summary.Value { tag = 1; simple_value = 2 }`. */
const summaryValue = (name: string, value: number) =>
  Uint8Array.from([...lengthDelimited(1, utf8.encode(name)), ...float(2, value)])

/** `Event { wall_time = 1; step = 2; file_version = 3 | summary = 5 }`, framed as a record. */
const event = (wallTime: number, step: number, body: Array<number>) =>
  record(Uint8Array.from([...double(1, wallTime), ...tag(2, 0), ...varint(step), ...body]))

/** The file's first record: which event format follows. */
export const fileVersionRecord = (wallTime: number): Uint8Array =>
  event(wallTime, 0, lengthDelimited(3, utf8.encode("brain.Event:2")))

/** One step's scalars as one Event (its Summary holds one value per name). */
export const scalarsRecord = (
  wallTime: number,
  step: number,
  values: ReadonlyArray<readonly [string, number]>
): Uint8Array => {
  const summary: Array<number> = []
  for (const [name, value] of values) summary.push(...lengthDelimited(1, summaryValue(name, value)))
  return event(wallTime, step, lengthDelimited(5, Uint8Array.from(summary)))
}
