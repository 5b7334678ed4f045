/**
 * Loading a user's module by path (an environment, reward functions): from anywhere on disk, TypeScript or
 * JavaScript, ESM or CommonJS, whether or not this process runs under tsx.
 */
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { pathToFileURL } from "node:url"

const typeScript = /\.(c|m)?tsx?$/

let hooks: Promise<void> | undefined

/**
 * tsx's ESM and CommonJS hooks, registered once. Both are needed: a `.ts` file in a project without
 * `"type": "module"` is CommonJS to Node, and with the ESM hook alone Node require()s it from inside its own
 * import ("Cannot require() ES Module … in a cycle").
 */
const typeScriptHooks = (): Promise<void> => {
  hooks ??= Promise.all([import("tsx/esm/api"), import("tsx/cjs/api")]).then(([esm, cjs]) => {
    esm.register()
    cjs.register()
  }, () => {
    // tsx is an optional peer of the published package: say so rather than blame the user's module's imports.
    throw new Error(
      "a TypeScript module loads through tsx, which is not installed here: `npm install --save-dev tsx` in your " +
        "project, or compile the module and give the path of its .js"
    )
  })
  return hooks
}

/** Why a module did not load, as one sentence naming the fix. */
export const loadProblem = (file: string, e: unknown): string => {
  if (!fs.existsSync(file)) return `no such file (${file})`
  const text = e instanceof Error ? e.message : String(e)
  const code = typeof e === "object" && e !== null && "code" in e ? e.code : undefined
  if (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") {
    const imported = /Cannot find (?:package|module) '([^']+)'/.exec(text)?.[1]
    if (imported !== undefined && !imported.startsWith(".") && !nodePath.isAbsolute(imported)) {
      const pkg = imported.startsWith("@") ? imported.split("/").slice(0, 2).join("/") : imported.split("/")[0]
      return `${file} imports '${imported}', which is not installed where the module is (${
        nodePath.dirname(file)
      } and its parents have no node_modules/${pkg}): install it in the module's project (npm install ${pkg})`
    }
    return `${file} imports a file that does not exist: ${text.split("\n")[0]}`
  }
  return `${file} failed to load: ${text.split("\n")[0]}`
}

/**
 * The module's exports. A CommonJS module compiled by tsx comes back as `{ default: exports }` (Node cannot see its
 * named exports), so its `exports` object is unwrapped to look like the ESM namespace it was written as.
 */
export const importModule = (file: string): Promise<Readonly<Record<string, unknown>>> =>
  (typeScript.test(file) ? typeScriptHooks() : Promise.resolve()).then(() =>
    import(pathToFileURL(file).href).then((module: Record<string, unknown>) => {
      const inner = module.default
      return typeof inner === "object" && inner !== null && (inner as { __esModule?: unknown }).__esModule === true
        ? inner as Record<string, unknown>
        : module
    })
  )
