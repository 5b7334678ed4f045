/**
 * mini-swe-agent (PyPI `mini-swe-agent`, pinned in interop/requirements.in), run unmodified inside a rollout's
 * `Sandbox`: its own `mini` command (`python -m minisweagent.run.mini`) with the stock mini.yaml, its "local"
 * bash environment (each action a subprocess in the task's workdir, which here is inside the sandbox), and
 * litellm's OpenAI provider pointed at the sandbox's one endpoint.
 *
 * How it runs offline, from its source: `--model openai/<served name>` picks litellm's OpenAI-compatible provider;
 * `-c model.model_kwargs.api_base=http://127.0.0.1:8100/v1` and `api_key=<key>` (the capture session id) go to every
 * `litellm.completion` call; `LITELLM_LOCAL_MODEL_COST_MAP=True` stops litellm fetching its price list at import;
 * `MSWEA_CONFIGURED` skips the first-run set-up prompt; `--yolo --exit-immediately` never asks for confirmation;
 * `--cost-limit 0` with `model.cost_tracking=ignore_errors` runs without a price for the model;
 * `agent.step_limit` bounds the model calls. The trajectory is written to /logs/agent/mini-swe-agent.traj.json.
 *
 * The Python environment is bound read-only: the project's .venv at /opt/venv and its base interpreter's prefix
 * at its own path (the venv's `python` links to it).
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Data, Duration, Effect } from "effect"
import type * as HarborTask from "./HarborTask.js"
import type * as Sandbox from "./Sandbox.js"
import * as ScriptedEndpoint from "./ScriptedEndpoint.js"

/** The Python environment could not be bound into a sandbox. */
export class MiniSweAgentError extends Data.TaggedError("MiniSweAgentError")<{ readonly message: string }> {}

/** Where the venv appears inside the sandbox. */
export const venvMount = "/opt/venv"

/** Where the trajectory is written inside the sandbox. */
export const trajectoryPath = "/logs/agent/mini-swe-agent.traj.json"

/** The command the stock mini.yaml tells the agent to run to submit. */
export const submitCommand = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

/**
 * A {@link ScriptedEndpoint} script in mini-swe-agent's stock format (mini.yaml: reasoning text plus one `bash` tool
 * call per response): the n-th call runs the n-th command, the last submits with {@link submitCommand}. Given a
 * task's solver commands, the agent solves the task (SFT transcripts in its own format, interop checks).
 *
 * @since 0.0.0
 */
export const solverScript = (commands: ReadonlyArray<string>): ReadonlyArray<ScriptedEndpoint.Reply> => [
  ...commands.map((command, i) =>
    ScriptedEndpoint.bash(command, `Step ${i + 1} of ${commands.length} of my plan for this task.`)
  ),
  ScriptedEndpoint.bash(submitCommand, "The task is done, so I submit.")
]

/**
 * The read-only binds a sandbox needs to run mini-swe-agent from `venv` (a venv with it installed, e.g. the
 * project's .venv): the venv itself and the interpreter prefix its pyvenv.cfg names.
 *
 * @since 0.0.0
 */
export const binds = (venv: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const cfg = yield* fs.readFileString(path.join(venv, "pyvenv.cfg")).pipe(
      Effect.mapError(() =>
        new MiniSweAgentError({
          message: `${venv} is not a Python venv (no pyvenv.cfg). Run \`bash scripts/ensure-venv.sh\` to make .venv.`
        })
      )
    )
    const home = /^home\s*=\s*(.+)$/m.exec(cfg)?.[1]?.trim()
    if (home === undefined) {
      return yield* new MiniSweAgentError({ message: `${venv}/pyvenv.cfg names no home; remake the venv.` })
    }
    const installed = yield* fs.exists(path.join(venv, "lib")).pipe(Effect.orElseSucceed(() => false))
    if (!installed) return yield* new MiniSweAgentError({ message: `${venv} has no lib/; remake the venv.` })
    const prefix = path.dirname(home)
    // A Debian system interpreter lives under /usr, which every sandbox has already.
    return [
      { host: path.resolve(venv), at: venvMount },
      ...(prefix === "/usr" ? [] : [{ host: prefix, at: prefix }])
    ]
  })

/** How to run it. */
export interface MiniSweAgentOptions {
  readonly task: HarborTask.HarborTask
  /** The served model name; litellm is given `openai/<model>`. */
  readonly model: string
  /** The key the agent sends: against the capture proxy, the capture session id. */
  readonly apiKey: string
  /** Default 10 model calls. */
  readonly stepLimit?: number
  /** max_tokens per call. Default 512. */
  readonly maxTokens?: number
  /** Timeout of each action it runs (its environment's `timeout`). Default 30 s. */
  readonly actionTimeoutSec?: number
  /** Sampling temperature sent with every call (0 = greedy). Default: none sent (the server's default). */
  readonly temperature?: number
}

/** The command line and environment for `Sandbox.exec`. */
export const command = (sandbox: Sandbox.Sandbox, options: MiniSweAgentOptions) => ({
  command: [
    `${venvMount}/bin/python -m minisweagent.run.mini`,
    `--model openai/${options.model}`,
    `--task "$MSWEA_TASK"`,
    "--yolo --exit-immediately --cost-limit 0",
    `--output ${trajectoryPath}`,
    "-c mini.yaml",
    `-c agent.step_limit=${options.stepLimit ?? 10}`,
    "-c model.cost_tracking=ignore_errors",
    `-c model.model_kwargs.api_base=${sandbox.endpointUrl}/v1`,
    `-c model.model_kwargs.api_key="$MSWEA_API_KEY"`,
    `-c model.model_kwargs.max_tokens=${options.maxTokens ?? 512}`,
    ...(options.temperature === undefined ? [] : [`-c model.model_kwargs.temperature=${options.temperature}`]),
    `-c environment.cwd=${options.task.config.workdir}`,
    `-c environment.timeout=${options.actionTimeoutSec ?? 30}`
  ].join(" "),
  env: {
    MSWEA_TASK: options.task.instruction,
    MSWEA_API_KEY: options.apiKey,
    MSWEA_CONFIGURED: "true",
    MSWEA_SILENT_STARTUP: "1",
    MSWEA_GLOBAL_CONFIG_DIR: "/tmp/mini-swe-agent",
    MSWEA_COST_TRACKING: "ignore_errors",
    LITELLM_LOCAL_MODEL_COST_MAP: "True",
    PYTHONDONTWRITEBYTECODE: "1"
  }
})

/**
 * Runs mini-swe-agent to its end inside the sandbox (which must have been made with `binds(venv)` among its
 * read-only binds and an endpoint). Its exit code and output come back as the command's.
 *
 * @since 0.0.0
 */
export const run = (
  sandbox: Sandbox.Sandbox,
  options: MiniSweAgentOptions & { readonly timeout?: Duration.DurationInput }
) => {
  const c = command(sandbox, options)
  return sandbox.exec(c.command, {
    env: c.env,
    timeout: options.timeout ?? Duration.seconds(options.task.config.agentTimeoutSec)
  })
}
