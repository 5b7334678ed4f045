// 10 calls of 200 ms wait per episode (see slowEnvironment.ts): I/O-bound, the runner's CPU free meanwhile.
import { Effect } from "effect"
import { slowed } from "./slowEnvironment.js"

export default slowed("latency-200ms", Effect.sleep("200 millis"), 10)
