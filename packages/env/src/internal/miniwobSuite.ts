/**
 * The real MiniWoB++ suite (Farama's `miniwob` PyPI package): task names `miniwob.<name>` play the package's own
 * `html/miniwob/<name>.html` pages. The pages' `core.js` keeps the episode in page globals (`WOB_DONE_GLOBAL`,
 * `WOB_RAW_REWARD_GLOBAL`), starts an episode with `core.startEpisodeReal()` after `Math.seedrandom(seed)`, and holds
 * the utterance in `#query` (`core.getUtterance()`).
 *
 * Where the pages are: `MINIWOB_HTML_DIR` (the package's `html` folder), else the first
 * `.venv/lib/python* /site-packages/miniwob/html` found from the working directory upwards (the project's interop
 * environment installs the package).
 */
import * as fs from "node:fs"
import * as path from "node:path"

/** The prefix that names a task of the real suite. */
export const PREFIX = "miniwob."

export const isSuiteName = (name: string): boolean => name.startsWith(PREFIX)

const hasPages = (dir: string) => fs.existsSync(path.join(dir, "miniwob")) && fs.existsSync(path.join(dir, "core"))

/** The package's `html` folder under a virtual environment, if it has one. */
const inVenv = (venv: string): string | undefined => {
  const lib = path.join(venv, "lib")
  let entries: Array<string>
  try {
    entries = fs.readdirSync(lib)
  } catch {
    return undefined
  }
  for (const py of entries.filter((e) => e.startsWith("python")).sort()) {
    const dir = path.join(lib, py, "site-packages", "miniwob", "html")
    if (hasPages(dir)) return dir
  }
  return undefined
}

/** Where the suite's pages are, or why they are not there (a message naming the fix). */
export const locate = (
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd()
): { readonly ok: true; readonly dir: string } | { readonly ok: false; readonly message: string } => {
  const given = env.MINIWOB_HTML_DIR
  if (given !== undefined && given !== "") {
    const dir = path.resolve(cwd, given)
    return hasPages(dir)
      ? { ok: true, dir }
      : {
        ok: false,
        message: `MINIWOB_HTML_DIR=${given} is not the miniwob package's html folder (it needs miniwob/ and core/ ` +
          `in it): point it at <site-packages>/miniwob/html, or unset it to use the project's .venv`
      }
  }
  for (let at = path.resolve(cwd);; at = path.dirname(at)) {
    const found = inVenv(path.join(at, ".venv"))
    if (found !== undefined) return { ok: true, dir: found }
    if (path.dirname(at) === at) break
  }
  return {
    ok: false,
    message: "the real MiniWoB++ suite is not installed: `pip install miniwob` into the project's .venv " +
      "(scripts/ensure-venv.sh does), or set MINIWOB_HTML_DIR to the package's html folder " +
      "(<site-packages>/miniwob/html)"
  }
}

/** The task names the suite at `dir` has (`miniwob.<name>`), sorted. */
export const suiteTasks = (dir: string): ReadonlyArray<string> =>
  fs.readdirSync(path.join(dir, "miniwob"))
    .filter((f) => f.endsWith(".html"))
    .map((f) => PREFIX + f.slice(0, -".html".length))
    .sort()

/** Checks a `miniwob.<name>` task: the page's path under the suite's folder, or why it cannot be played. */
export const resolve = (
  task: string,
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd()
): { readonly ok: true; readonly dir: string; readonly page: string } | {
  readonly ok: false
  readonly message: string
} => {
  const found = locate(env, cwd)
  if (!found.ok) return { ok: false, message: `cannot play '${task}': ${found.message}` }
  const name = task.slice(PREFIX.length)
  return /^[\w-]+$/.test(name) && fs.existsSync(path.join(found.dir, "miniwob", `${name}.html`))
    ? { ok: true, dir: found.dir, page: `miniwob/${name}.html` }
    : { ok: false, message: `no task '${task}': ${path.join(found.dir, "miniwob")} has no ${name}.html` }
}

/**
 * Starts an episode on a loaded suite page as BrowserGym's MiniWoB tasks do: the seed (a number, as the `miniwob`
 * package passes it), a 1 000 000 ms episode timer so the page's own 10 s limit never ends an episode that the step
 * limit governs, the human-facing displays (reward panel, click canvas, START cover) hidden, then the page's start.
 */
export const startScript = (seed: number): string =>
  `(() => {
  Math.seedrandom(${JSON.stringify(seed)});
  core.EPISODE_MAX_TIME = 1000000;
  const style = document.createElement("style");
  style.textContent = "#reward-display, #click-canvas, #sync-task-cover { display: none !important; }";
  document.head.appendChild(style);
  core.startEpisodeReal();
})()`

/** True once the page says its task is ready (some pages build it asynchronously). */
export const READY_SCRIPT = "typeof WOB_TASK_READY === 'undefined' || WOB_TASK_READY === true"

/** The page's utterance, as the page reads it. */
export const GOAL_SCRIPT = "core.getUtterance()"
