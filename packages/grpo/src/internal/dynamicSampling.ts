/**
 * Dynamic sampling (DAPO, Yu et al. 2025, §3.2; TRL has no such key): a group whose rewards all agree has zero
 * advantage everywhere, so its episodes teach nothing. Such groups are rolled out again with fresh sampling seeds,
 * up to `rounds` times, and the first re-roll whose rewards vary takes the group's place; the batch keeps its size
 * and its group order. Mode "failed" re-rolls only the flat groups at the batch's lowest reward: a small policy that
 * fails one kind of prompt every time at a low temperature gets no signal there otherwise, while re-rolling the
 * groups it always wins mostly buys more wins.
 */
import type { EpisodeRecord } from "@envtrain/rollout/Episode"
import { Effect } from "effect"
import type * as Reward from "../Reward.js"

/** What a flat group is re-rolled against. */
export interface Options<State, E, R> {
  readonly mode: "flat" | "failed"
  readonly rounds: number
  readonly numGenerations: number
  readonly records: ReadonlyArray<EpisodeRecord<State>>
  readonly table: Reward.RewardTable
  /** Rolls out the given groups (indices into the batch's prompts) again, group-major, seeded by `round`. */
  readonly reroll: (groups: ReadonlyArray<number>, round: number) => Effect.Effect<
    { readonly records: ReadonlyArray<EpisodeRecord<State>>; readonly table: Reward.RewardTable },
    E,
    R
  >
}

/** The batch after dynamic sampling, and what it cost. */
export interface Resampled<State> {
  readonly records: ReadonlyArray<EpisodeRecord<State>>
  readonly table: Reward.RewardTable
  readonly metrics: Record<string, number>
}

/** Group `g`'s scoreable rewards (NaN = unscoreable, left out). */
const groupRewards = (table: Reward.RewardTable, g: number, G: number): Array<number> => {
  const out: Array<number> = []
  for (let i = g * G; i < (g + 1) * G; i++) if (!Number.isNaN(table.rewards[i])) out.push(table.rewards[i])
  return out
}

/** Fewer than two distinct scoreable rewards: every advantage of the group is zero. */
const isFlat = (rewards: ReadonlyArray<number>) => rewards.every((r) => r === rewards[0])

/** The groups to re-roll: flat ones, and in "failed" mode only those whose common reward is the batch's lowest. */
export const flatGroups = (
  table: Reward.RewardTable,
  numGenerations: number,
  mode: "flat" | "failed"
): Array<number> => {
  const groups = table.episodes / numGenerations
  let lowest = Infinity
  for (const r of table.rewards) if (!Number.isNaN(r) && r < lowest) lowest = r
  const out: Array<number> = []
  for (let g = 0; g < groups; g++) {
    const rewards = groupRewards(table, g, numGenerations)
    if (!isFlat(rewards)) continue
    // A group with no scoreable episode has no reward to compare; re-rolled in either mode.
    if (mode === "failed" && rewards.length > 0 && rewards[0] > lowest) continue
    out.push(g)
  }
  return out
}

/** `table` with group `g`'s rows replaced by group `from`'s rows of `source`. */
const replaceGroup = (
  table: Reward.RewardTable,
  g: number,
  source: Reward.RewardTable,
  from: number,
  G: number
): Reward.RewardTable => {
  const k = table.names.length
  const values = table.values.slice()
  const rewards = table.rewards.slice()
  const unscoreable = [...table.unscoreable]
  values.set(source.values.subarray(from * G * k, (from + 1) * G * k), g * G * k)
  rewards.set(source.rewards.subarray(from * G, (from + 1) * G), g * G)
  for (let i = 0; i < G; i++) unscoreable[g * G + i] = source.unscoreable[from * G + i]
  return { ...table, values, rewards, unscoreable }
}

/**
 * Re-rolls the flat groups (see the module comment) and swaps in each first re-roll that varies. Metrics:
 * `dynamic_sampling/flat_groups` (flat before), `…/replaced_groups`, `…/flat_groups_left`, `…/extra_episodes`.
 */
export const resample = <State, E, R>(options: Options<State, E, R>): Effect.Effect<Resampled<State>, E, R> =>
  Effect.gen(function*() {
    const G = options.numGenerations
    const records = [...options.records]
    let table = options.table
    const initiallyFlat = flatGroups(table, G, options.mode)
    let waiting = initiallyFlat
    let extra = 0
    for (let round = 1; round <= options.rounds && waiting.length > 0; round++) {
      const again = yield* options.reroll(waiting, round)
      extra += again.records.length
      const still: Array<number> = []
      waiting.forEach((g, j) => {
        if (isFlat(groupRewards(again.table, j, G))) {
          still.push(g)
          return
        }
        for (let i = 0; i < G; i++) records[g * G + i] = again.records[j * G + i]
        table = replaceGroup(table, g, again.table, j, G)
      })
      waiting = still
    }
    return {
      records,
      table,
      metrics: {
        "dynamic_sampling/flat_groups": initiallyFlat.length,
        "dynamic_sampling/replaced_groups": initiallyFlat.length - waiting.length,
        "dynamic_sampling/flat_groups_left": waiting.length,
        "dynamic_sampling/extra_episodes": extra
      }
    }
  })
