// A careless solver's plausible-but-wrong solutions of the shipped training tasks (packages/harness/tasks/train),
// for the harness example's `--sft-mistakes F`. Each runs without error and fails its task's verifier the same way
// every time, so an SFT mix of right and wrong transcripts leaves the model a recurring choice at one place in the
// command, which a GRPO group's comparison can see and fix (the earlier runs' failures were one-off token slips,
// bench/results/learning-harness.md). Harbor's task layout has no place for wrong solutions, so they live here, not
// in the tasks; examples/test/SolverMistakes.test.ts runs each in a real sandbox against its verifier.

import type { HarborTask } from "@envtrain/harness"
import { Effect } from "effect"

/** A wrong solution: the commands (run in order, as solution/solve.sh's are) and why the verifier refuses them. */
export interface Mistake {
  readonly commands: ReadonlyArray<string>
  readonly fails: string
}

/** By shipped training task name. */
export const shipped: Readonly<Record<string, Mistake>> = {
  "append-line": {
    commands: ["echo done > todo.txt"],
    fails: "`>` instead of `>>`: todo.txt is overwritten, the earlier lines are lost"
  },
  "copy-file": {
    commands: ["mkdir -p backup", "mv src/main.c backup/main.c"],
    fails: "`mv` instead of `cp`: the original is gone"
  },
  "count-lines": {
    commands: ["wc -l data.txt > count.txt"],
    fails: "`wc -l FILE` writes `7 data.txt`, not only the number"
  },
  "create-file": {
    commands: ["echo 'Hello, world' > hello.txt"],
    fails: "the habitual greeting, not the text asked for (`hello world`)"
  },
  "delete-logs": {
    commands: ["rm -f a.log"],
    fails: "deletes the first .log file only; b.log stays"
  },
  "fix-config-typo": {
    commands: ["sed 's/^prot = /port = /' config.ini"],
    fails: "`sed` without `-i` prints the fix and leaves config.ini unchanged"
  },
  "make-directory": {
    commands: ["mkdir -p build output"],
    fails: "two sibling directories, not build/output"
  },
  "make-executable": {
    commands: ["sh run.sh"],
    fails: "runs the script instead of making it executable"
  },
  "rename-extension": {
    commands: ["for f in notes/*.txt; do mv \"$f\" \"$f.md\"; done"],
    fails: "appends `.md` (monday.txt.md) instead of replacing `.txt`"
  },
  "sort-lines": {
    commands: ["sort words.txt"],
    fails: "prints the sorted lines and writes no sorted.txt"
  },
  "sum-numbers": {
    commands: ["awk '{s+=$1; print s}' numbers.txt > sum.txt"],
    fails: "prints the running sum after every line, not only the total"
  },
  "uppercase": {
    commands: ["tr A-Z a-z < name.txt > NAME.txt"],
    fails: "the ranges the wrong way round: lower case, not upper"
  }
}

/** The commands one SFT solver transcript replays: the task's own solution, or its wrong one. */
export interface Solution {
  readonly task: HarborTask.HarborTask
  readonly kind: "right" | "wrong"
  readonly commands: ReadonlyArray<string>
}

/**
 * The solutions SFT replays, per task: `copies` transcripts of which round(copies x fraction) replay the wrong
 * solution, the rest the task's own; copies is the fewest (at most 8) that make the fraction exact, 1 when it is 0 (one
 * right transcript per task, as without mistakes). A task without a wrong solution gets only right ones.
 */
export const mix = (tasks: ReadonlyArray<HarborTask.HarborTask>, fraction: number) =>
  Effect.gen(function*() {
    const copies = [1, 2, 3, 4, 5, 6, 7, 8].find((n) => Math.abs(n * fraction - Math.round(n * fraction)) < 1e-9)
    if (!(fraction >= 0 && fraction <= 1) || copies === undefined) {
      return yield* Effect.dieMessage(
        `--sft-mistakes ${fraction}: give a fraction from 0 to 1 with a denominator of at most 8 (0.5, 0.25, 0.375…)`
      )
    }
    const wrong = Math.round(copies * fraction)
    return tasks.flatMap((task): Array<Solution> => {
      const mistake = shipped[task.name]
      return Array.from({ length: copies }, (_, i) =>
        i < wrong && mistake !== undefined
          ? { task, kind: "wrong", commands: mistake.commands }
          : { task, kind: "right", commands: task.solverCommands })
    })
  })
