// envtrain's training rows of TrainingTraces, for the interop suite (interop/python/test_capture_trace.py compares
// them with TRL's harness worker's rows). Usage: tsx traceRows.ts IN.json OUT.json, IN a JSON list of traces; OUT
// gets one list of rows per trace, each {prompt_ids, completion_ids, mask, logprobs}.
import * as TrainingTrace from "@envtrain/harness/TrainingTrace"
import { Effect } from "effect"
import * as Fs from "node:fs"

const [input, out] = process.argv.slice(2)
if (input === undefined || out === undefined) throw new Error("usage: traceRows.ts IN.json OUT.json")

const program = Effect.forEach(
  JSON.parse(Fs.readFileSync(input, "utf8")) as ReadonlyArray<unknown>,
  (json) =>
    Effect.map(TrainingTrace.decode(json), (trace) =>
      TrainingTrace.rows(trace).map((row) => ({
        prompt_ids: row.promptIds,
        completion_ids: row.completionIds,
        mask: row.mask,
        logprobs: row.logprobs
      })))
)

Effect.runPromise(program).then((rows) => {
  Fs.writeFileSync(out, JSON.stringify(rows))
  process.exit(0)
}, (e) => {
  console.error(e)
  process.exit(1)
})
