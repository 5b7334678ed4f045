/** Finding Debian's Chromium and the processes playwright-core started from it. */
import * as fs from "node:fs"

/** `CHROMIUM_PATH`, else the distribution's binary, if one exists. */
export const findChromium = (): string | undefined => {
  const candidates = [process.env.CHROMIUM_PATH, "/usr/bin/chromium", "/usr/bin/chromium-browser"]
  return candidates.find((p): p is string => p !== undefined && p !== "" && fs.existsSync(p))
}

const readOr = (path: string) => {
  try {
    return fs.readFileSync(path, "utf8")
  } catch {
    return ""
  }
}

/** Parent pid from `/proc/<pid>/stat` (the field after the parenthesised command, which may hold spaces). */
const parentOf = (pid: string): number | undefined => {
  const stat = readOr(`/proc/${pid}/stat`)
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return rest.length > 1 ? Number(rest[1]) : undefined
}

/**
 * The browser processes this process started: direct children whose command line has playwright's
 * `--remote-debugging-pipe` (Debian's `/usr/bin/chromium` is a script that `exec`s the binary, keeping the pid).
 * Playwright's `Browser` does not expose the pid; tests and the bench need it.
 */
export const chromiumChildPids = (): ReadonlyArray<number> => {
  let entries: Array<string> = []
  try {
    entries = fs.readdirSync("/proc").filter((e) => /^\d+$/.test(e))
  } catch {
    return []
  }
  return entries.filter((pid) =>
    parentOf(pid) === process.pid && readOr(`/proc/${pid}/cmdline`).includes("--remote-debugging-pipe")
  ).map(Number)
}

/** Every process in the tree under `root` (root included). */
export const processTree = (root: number): ReadonlyArray<number> => {
  let entries: Array<string> = []
  try {
    entries = fs.readdirSync("/proc").filter((e) => /^\d+$/.test(e))
  } catch {
    return [root]
  }
  const children = new Map<number, Array<number>>()
  for (const pid of entries) {
    const parent = parentOf(pid)
    if (parent === undefined) continue
    const list = children.get(parent) ?? []
    list.push(Number(pid))
    children.set(parent, list)
  }
  const out: Array<number> = []
  const stack = [root]
  while (stack.length > 0) {
    const pid = stack.pop()!
    out.push(pid)
    stack.push(...(children.get(pid) ?? []))
  }
  return out
}

/** Proportional set size (KiB) of one process, from `/proc/<pid>/smaps_rollup` (0 if unreadable). */
export const pssKiB = (pid: number): number => {
  const m = /^Pss:\s+(\d+) kB/m.exec(readOr(`/proc/${pid}/smaps_rollup`))
  return m ? Number(m[1]) : 0
}
