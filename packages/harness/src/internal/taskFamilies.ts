// The task families TaskFamily.ts generates from: each draws names and words from small vocabularies with a seeded
// PRNG and returns the instance's instruction, starting files, solver commands and the verifier's check. The
// instructions keep one fixed wording per family and the solutions one fixed shape, so that what varies between
// instances is only what the agent must copy from the instruction into its command.

/** One starting file of an instance's workspace. */
export interface FileSpec {
  readonly path: string
  readonly content: string
  readonly executable?: boolean
}

/** What a family makes for one seed. */
export interface Made {
  readonly instruction: string
  readonly files: ReadonlyArray<FileSpec>
  /** The scripted solver: shell commands, one per line of solution/solve.sh. */
  readonly solution: ReadonlyArray<string>
  /** A bash condition, run in the workdir, true exactly when the task is done. */
  readonly check: string
}

/** The names and words an instance may draw. */
export interface Vocabulary {
  readonly stems: ReadonlyArray<string>
  readonly words: ReadonlyArray<string>
}

export interface FamilySpec {
  readonly name: string
  readonly summary: string
  readonly make: (rand: () => number, v: Vocabulary) => Made
}

// Words that the presets' tokenizer encodes in one or two tokens after a space (checked when chosen), so the
// model copies short token sequences.
const allStems = [
  "river",
  "green",
  "horse",
  "paper",
  "plant",
  "bread",
  "money",
  "game",
  "ball",
  "box",
  "stone",
  "cloud",
  "table",
  "water",
  "light",
  "music"
] as const
const allWords = [
  "night",
  "house",
  "sugar",
  "red",
  "fish",
  "tree",
  "rain",
  "moon",
  "star",
  "sun",
  "wind",
  "lake",
  "book",
  "door",
  "cake",
  "sky"
] as const
/** The first `size` of each list (all 16 when `size` is 16 or more; at least 4, which two-name families need). */
export const vocabulary = (size: number): Vocabulary => {
  const k = Math.max(4, Math.min(size, allStems.length))
  return { stems: allStems.slice(0, k), words: allWords.slice(0, k) }
}

const junkExtensions = ["log", "tmp", "bak", "old", "out"] as const
const keptExtensions = ["txt", "md"] as const

const pick = <A>(rand: () => number, xs: ReadonlyArray<A>): A => xs[Math.floor(rand() * xs.length)]

/** `k` distinct items, in draw order. */
const distinct = <A>(rand: () => number, xs: ReadonlyArray<A>, k: number): Array<A> => {
  const pool = [...xs]
  const out: Array<A> = []
  for (let i = 0; i < k; i++) out.push(pool.splice(Math.floor(rand() * pool.length), 1)[0])
  return out
}

const int = (rand: () => number, lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1))

/** `n` lines of one or two words each, as file content (newline-terminated). */
const lines = (rand: () => number, words: ReadonlyArray<string>, n: number) =>
  Array.from({ length: n }, () => rand() < 0.5 ? pick(rand, words) : `${pick(rand, words)} ${pick(rand, words)}`)

const text = (ls: ReadonlyArray<string>) => ls.join("\n") + "\n"

// `$(cat f)` drops trailing newlines, so the expected value is compared without its final one. Every name and word
// is [a-z], so single quotes need no escaping.
const contentIs = (file: string, expected: string) =>
  `[ "$(cat ${file} 2>/dev/null)" = '${expected.replace(/\n+$/, "")}' ]`

export const families: ReadonlyArray<FamilySpec> = [
  {
    name: "write-text",
    summary: "create FILE containing two given words",
    make: (rand, { stems, words }) => {
      const file = `${pick(rand, stems)}.txt`
      const [a, b] = distinct(rand, words, 2)
      return {
        instruction:
          `Create a file named \`${file}\` in the current directory containing exactly the text \`${a} ${b}\` (one line).`,
        files: [],
        solution: [`echo '${a} ${b}' > ${file}`],
        check: contentIs(file, `${a} ${b}`)
      }
    }
  },
  {
    name: "count-lines",
    summary: "count the lines of FILE and write the number to OUT",
    make: (rand, { stems, words }) => {
      const [a, b] = distinct(rand, stems, 2)
      const n = int(rand, 3, 9)
      return {
        instruction: `Count the lines of \`${a}.txt\` and write only the number to a new file \`${b}.txt\`.`,
        files: [{ path: `${a}.txt`, content: text(lines(rand, words, n)) }],
        solution: [`wc -l < ${a}.txt > ${b}.txt`],
        check: `[ "$(tr -d ' \\n' < ${b}.txt 2>/dev/null)" = '${n}' ]`
      }
    }
  },
  {
    name: "copy-file",
    summary: "copy FILE to a new name, keeping the original",
    make: (rand, { stems, words }) => {
      const [a, b] = distinct(rand, stems, 2)
      const content = text(lines(rand, words, int(rand, 2, 4)))
      return {
        instruction: `Copy \`${a}.txt\` to \`${b}.txt\`; keep the original.`,
        files: [{ path: `${a}.txt`, content }],
        solution: [`cp ${a}.txt ${b}.txt`],
        check: `${contentIs(`${a}.txt`, content)} && ${contentIs(`${b}.txt`, content)}`
      }
    }
  },
  {
    name: "append-line",
    summary: "append a given word as a final line of FILE",
    make: (rand, { stems, words }) => {
      const a = pick(rand, stems)
      const before = lines(rand, words, int(rand, 2, 4))
      const w = pick(rand, words)
      return {
        instruction: `Append a final line \`${w}\` to \`${a}.txt\`, keeping the lines already there.`,
        files: [{ path: `${a}.txt`, content: text(before) }],
        solution: [`echo ${w} >> ${a}.txt`],
        check: contentIs(`${a}.txt`, text([...before, w]))
      }
    }
  },
  {
    name: "make-executable",
    summary: "make a script executable",
    make: (rand, { stems, words }) => {
      // Both vocabularies: the instruction names only the script, so one vocabulary would give 16 instances.
      const a = pick(rand, [...stems, ...words])
      const content = `#!/bin/bash\necho ${pick(rand, words)}\n`
      return {
        instruction: `Make the script \`${a}.sh\` executable.`,
        files: [{ path: `${a}.sh`, content }],
        solution: [`chmod +x ${a}.sh`],
        check: `[ -x ${a}.sh ] && ${contentIs(`${a}.sh`, content)}`
      }
    }
  },
  {
    name: "delete-by-pattern",
    summary: "delete every file with a given extension in a directory, keeping the others",
    make: (rand, { stems, words }) => {
      const dir = pick(rand, words)
      const ext = pick(rand, junkExtensions)
      const names = distinct(rand, stems, 4)
      const junk = names.slice(0, int(rand, 1, 2)).map((s) => `${dir}/${s}.${ext}`)
      const kept = names.slice(junk.length).map((s) => `${dir}/${s}.${pick(rand, keptExtensions)}`)
      return {
        instruction:
          `Delete every file ending in \`.${ext}\` in the directory \`${dir}/\`; leave all other files alone.`,
        files: [...junk, ...kept].map((path) => ({ path, content: text(lines(rand, words, 1)) })),
        solution: [`rm -f ${dir}/*.${ext}`],
        check: [...junk.map((f) => `[ ! -e ${f} ]`), ...kept.map((f) => `[ -f ${f} ]`)].join(" && ")
      }
    }
  },
  {
    name: "uppercase",
    summary: "write FILE's contents in upper case to OUT",
    make: (rand, { stems, words }) => {
      const [a, b] = distinct(rand, stems, 2)
      const content = text(lines(rand, words, int(rand, 1, 3)))
      return {
        instruction: `Write the contents of \`${a}.txt\` in upper case to a new file \`${b}.txt\`.`,
        files: [{ path: `${a}.txt`, content }],
        solution: [`tr a-z A-Z < ${a}.txt > ${b}.txt`],
        check: contentIs(`${b}.txt`, content.toUpperCase())
      }
    }
  },
  {
    name: "rename-file",
    summary: "rename FILE to a given new name",
    make: (rand, { stems, words }) => {
      const [a, b] = distinct(rand, stems, 2)
      const content = text(lines(rand, words, int(rand, 1, 3)))
      return {
        instruction: `Rename \`${a}.txt\` to \`${b}.txt\`.`,
        files: [{ path: `${a}.txt`, content }],
        solution: [`mv ${a}.txt ${b}.txt`],
        check: `[ ! -e ${a}.txt ] && ${contentIs(`${b}.txt`, content)}`
      }
    }
  }
]

/** FNV-1a of the text: the family's name and the seed become one PRNG seed. */
export const hash = (s: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0
  return h
}
