// The ESLint rule behind the dependency direction (the table itself lives in eslint.config.mjs).
//
// Every import is resolved to a path in the repository: `@envtrain/<pkg>[/X]` through the packages' exports
// ("." → src/index.ts, "./*" → src/*.ts), a relative specifier against the importing file. The most specific
// table key (a folder or a file) containing the importing file governs it; the import is allowed when the
// target lies inside that key or inside one of the places the key lists. Files no key governs, and targets
// outside the repository's governed places (npm packages, root config files), are not checked.
import * as Path from "node:path"

const stripExtension = (path) => path.replace(/\.(d\.ts|ts|tsx|mts|cts|js|mjs|cjs|jsx)$/, "")

// `inside("packages/gpu", "packages/gpu/src/Gpu")` — a path is inside a key when it is the key or below it.
const inside = (key, path) => path === key || path.startsWith(key + "/")

const mostSpecific = (keys, path) => {
  let best = undefined
  for (const key of keys) if (inside(key, path) && (best === undefined || key.length > best.length)) best = key
  return best
}

/** @type {import("eslint").Rule.RuleModule} */
export default {
  meta: {
    type: "problem",
    docs: { description: "Enforce which package and folder may import which (docs/architecture.md)." },
    schema: [{
      type: "object",
      properties: {
        root: { type: "string" },
        packages: { type: "object", additionalProperties: { type: "array", items: { type: "string" } } },
        rules: { type: "object", additionalProperties: { type: "array", items: { type: "string" } } }
      },
      required: ["root", "packages", "rules"],
      additionalProperties: false
    }],
    messages: {
      direction: "{{from}} may not import {{target}} ({{spec}}); it may import: {{allowed}}. See docs/architecture.md.",
      internal: "{{spec}} reaches into a package's internals; import the package's public module instead."
    }
  },
  create(context) {
    const { packages, root, rules } = context.options[0]
    const keys = Object.keys(rules).map(stripExtension)
    const byKey = new Map(Object.entries(rules).map(([key, may]) => [stripExtension(key), may]))
    const file = Path.relative(root, context.filename).split(Path.sep).join("/")
    const governing = file.startsWith("..") ? undefined : mostSpecific(keys, stripExtension(file))
    if (governing === undefined) return {}
    // A name without a slash stands for a package's places; anything else is a folder or file.
    const places = (name) => name.includes("/") ? [stripExtension(name)] : (packages[name] ?? []).map(stripExtension)
    const allowed = [governing, ...byKey.get(governing).flatMap(places)]
    // Every place any key or package names: imports that land elsewhere are not ours to judge.
    const governed = [...keys, ...Object.values(packages).flat().map(stripExtension)]

    const resolve = (spec) => {
      const scoped = /^@envtrain\/([^/]+)(?:\/(.*))?$/.exec(spec)
      if (scoped !== null) {
        const [, name, sub] = scoped
        const folder = packages[name]?.[0]
        if (folder === undefined) return undefined
        if (sub === undefined) return `${folder}/src/index`
        if (sub === "package.json") return `${folder}/package.json`
        return `${folder}/src/${stripExtension(sub)}`
      }
      if (spec.startsWith("./") || spec.startsWith("../")) {
        const absolute = Path.resolve(Path.dirname(context.filename), spec)
        return stripExtension(Path.relative(root, absolute).split(Path.sep).join("/"))
      }
      return undefined
    }

    const check = (node, source) => {
      if (source === null || source === undefined || typeof source.value !== "string") return
      const spec = source.value
      if (/^@envtrain\/[^/]+\/internal(\/|$)/.test(spec)) {
        context.report({ node: source, messageId: "internal", data: { spec } })
        return
      }
      const target = resolve(spec)
      if (target === undefined || target.startsWith("..")) return
      if (!governed.some((place) => inside(place, target))) return
      if (allowed.some((place) => inside(place, target))) return
      context.report({
        node: source,
        messageId: "direction",
        data: { from: governing, target, spec, allowed: allowed.join(", ") }
      })
    }

    return {
      ImportDeclaration: (node) => check(node, node.source),
      ExportAllDeclaration: (node) => check(node, node.source),
      ExportNamedDeclaration: (node) => check(node, node.source),
      ImportExpression: (node) => check(node, node.source),
      TSImportType: (node) => check(node, node.argument?.literal ?? node.argument),
      TSExternalModuleReference: (node) => check(node, node.expression)
    }
  }
}
