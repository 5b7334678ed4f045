/** A client for one `textarena_env` session (Wordle-v0, Sudoku-v0): action `{message}`, the TextArena observation. */
import { Schema } from "effect"
import * as Client from "../Client.js"

export const TextArenaObservation = Schema.Struct({
  prompt: Schema.String,
  messages: Schema.Array(Schema.Struct({ sender_id: Schema.Number, content: Schema.String, category: Schema.String }))
})

export const textArenaClient = (url: string, options: Omit<Client.ClientOptions, "url" | "action" | "observation">) =>
  Client.make({ ...options, url, action: Schema.Struct({ message: Schema.String }), observation: TextArenaObservation })

export const transcriptOf = (o: typeof TextArenaObservation.Type) => o.messages[0]?.content ?? ""
