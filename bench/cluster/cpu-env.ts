// 1 call of 200 ms of the runner's own CPU per episode (see slowEnvironment.ts): CPU-bound.
import { slowed, spin } from "./slowEnvironment.js"

export default slowed("cpu-200ms", spin(200), 1)
