// The README's environment: TRL's EchoToolEnv written once. `envtrain train` trains it (`environment:
// ./examples/src/environments/echo.ts`), `envtrain serve ./examples/src/environments/echo.ts` serves it to OpenEnv's
// Python clients, and `echo.remote(url)` plays it on that server.
import { Definition } from "@envtrain/env"
import { Schema } from "effect"

export default Definition.make({
  name: "echo-defined",
  description: "The environment echoes the message back; longer messages earn more (0.1 per character).",
  start: () => ({ reward: 0, echoes: 0 }),
  tools: {
    echo: {
      description: "Echo the message back from the environment.",
      parameters: { message: Schema.String.annotations({ description: "The message to echo" }) },
      returns: "The echoed message.",
      run: (state, { message }) => {
        if (message.length === 0) throw new Error("message: String should have at least 1 character")
        state.reward = [...message].length * 0.1
        state.echoes += 1
        return message
      }
    }
  },
  reward: (state) => state.reward
})
