/** TextArena's Wordle word lists, shipped in the package's data/ folder and read once on first use. */
import { readFileSync } from "node:fs"

const load = (file: string): ReadonlyArray<string> =>
  readFileSync(new URL(`../../data/${file}`, import.meta.url), "utf8").split("\n").map((w) => w.trim()).filter((
    w
  ) => w.length > 0)

let secrets: ReadonlyArray<string> | undefined
let guesses: ReadonlySet<string> | undefined
let guessList: ReadonlyArray<string> | undefined

/** The 156 secret words (NLTK en-basic, 5 letters, tagged NN). */
export const secretWords = (): ReadonlyArray<string> => (secrets ??= load("wordle_secret_words.txt"))

/** The 10,879 valid 5-letter guesses, in file order. */
export const validGuessList = (): ReadonlyArray<string> => (guessList ??= load("wordle_valid_guesses.txt"))

/** The valid guesses as a set. */
export const validGuesses = (): ReadonlySet<string> => (guesses ??= new Set(validGuessList()))
