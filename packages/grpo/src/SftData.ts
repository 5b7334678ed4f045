/**
 * SFT transcripts from a scripted player, in exactly the tool-calling format the policy sees during GRPO: the
 * example's prompt messages (the reset observation appended to the last one, as the episode loop does), then per
 * move an assistant turn with a short reasoning line and one `<tool_call>`, and the tool's answer as a tool
 * message; the episode ends with a short assistant line and no call (the loop's "no tool call" stop).
 *
 * The players are the environments' solvers with a fixed error rate, so the warm-started policy is imperfect and
 * GRPO has room to improve it.
 *
 * @example
 * ```ts
 * import { Recipe, SftData } from "@envtrain/grpo"
 * const transcripts = yield* SftData.collect(Recipe.catchRecipe, { seeds: Dataset.range(0, 200), errorRate: 0.2 })
 * yield* SftData.writeJsonl("runs/catch/sft.jsonl", transcripts)
 * ```
 */
import { FileSystem } from "@effect/platform"
import { Environment } from "@envtrain/env"
import type { ChatMessage, ToolDefinition } from "@envtrain/text/ChatTemplate"
import { Data, Effect, Option } from "effect"
import type * as Recipe from "./Recipe.js"
import type * as SftTrainer from "./SftTrainer.js"

/** Writing the transcripts failed. */
export class SftDataError
  extends Data.TaggedError("SftDataError")<{ readonly path: string; readonly problem: string }>
{
  override get message() {
    return `SFT data ${this.path}: ${this.problem}`
  }
}

/** Options of {@link collect}. */
export interface CollectOptions {
  /** One episode per seed (use seeds disjoint from the evaluation's). */
  readonly seeds: ReadonlyArray<number>
  /** Probability that the player makes a random move instead of the solver's. */
  readonly errorRate: number
  /** Seed of the player's mistakes. */
  readonly playerSeed?: number
  /** Extra dataset columns per seed (e.g. which environment a multi-env row plays). */
  readonly columns?: (seed: number) => Readonly<Record<string, unknown>>
}

/**
 * Plays one episode per seed with the recipe's imperfect player and returns the transcripts.
 */
export const collect = <State>(recipe: Recipe.Recipe<State>, options: CollectOptions) =>
  Effect.gen(function*() {
    const tools = Environment.toolDefinitions(recipe.environment) as unknown as ReadonlyArray<ToolDefinition>
    const out: Array<SftTrainer.Transcript> = []
    for (const seed of options.seeds) {
      const row = { seed, ...recipe.columns?.(seed), ...options.columns?.(seed) }
      const player = recipe.player({ errorRate: options.errorRate, seed: (options.playerSeed ?? 0) * 1_000_003 + seed })
      const result = yield* Environment.run(recipe.environment, row, player)
      out.push({ messages: transcriptOf(recipe, row, result), tools })
    }
    return out
  })

/** Turns a played episode into chat messages (prompt, then assistant / tool turns, then a closing line). */
export const transcriptOf = <State>(
  recipe: Recipe.Recipe<State>,
  row: Readonly<Record<string, unknown>>,
  result: Environment.EpisodeResult<State>
): Array<ChatMessage> => {
  const prompt = recipe.prompt(row)
  const last = prompt[prompt.length - 1]
  const observation = Option.getOrElse(result.observation, () => "")
  const messages: Array<ChatMessage> = [
    ...prompt.slice(0, -1),
    { ...last, content: last.content + observation }
  ]
  let seen = observation
  for (const step of result.steps) {
    const args = step.args as Readonly<Record<string, unknown>>
    messages.push({
      role: "assistant",
      content: recipe.reasoning(seen, step.tool, args),
      tool_calls: [{ type: "function", function: { name: step.tool, arguments: args } }]
    })
    messages.push({ role: "tool", name: step.tool, content: step.outcome.text })
    seen = step.outcome.text
  }
  messages.push({ role: "assistant", content: recipe.closing(result.state) })
  return messages
}

/** Writes transcripts as JSONL (`{"messages": [...], "tools": [...]}` per line), the format `SftTrainer` reads. */
export const writeJsonl = Effect.fn("SftData.writeJsonl")(
  function*(path: string, transcripts: ReadonlyArray<SftTrainer.Transcript>) {
    const fs = yield* FileSystem.FileSystem
    const text = transcripts.map((t) => JSON.stringify(t)).join("\n") + "\n"
    yield* fs.writeFileString(path, text).pipe(
      Effect.mapError((e) => new SftDataError({ path, problem: `cannot write (${e.message}); check the directory` }))
    )
  }
)
