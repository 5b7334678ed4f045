// `npm run docs`: the reference documentation of the six packages, generated from the sources' doc comments by
// TypeDoc (typedoc.json) into build/docs/. `npm run docs:check` (part of `npm test`) converts and validates
// without writing. Either fails on any TypeDoc warning or error, and on an exported symbol without a doc comment:
// TypeDoc's own check covers variables, classes, interfaces, type aliases and enums; a top-level exported function
// (`export const f = (…) =>`, which TypeDoc models as a function) is checked here, because listing "Function" in
// TypeDoc's `requiredToBeDocumented` would also demand a comment on every function-typed member of every service
// shape. Modules in `internal/` folders are not public and not documented.
import { Application, ReflectionKind } from "typedoc"

const check = process.argv.includes("--check")
const app = await Application.bootstrapWithPlugins({ options: "typedoc.json" })
const project = await app.convert()
if (project === undefined) {
  console.error("docs: TypeDoc could not convert the packages (see above).")
  process.exit(1)
}
app.validate(project)

const undocumented = []
for (const module of project.getReflectionsByKind(ReflectionKind.Module)) {
  for (const child of module.children ?? []) {
    if (!child.kindOf(ReflectionKind.Function)) continue
    const documented = child.hasComment() || (child.signatures ?? []).every((s) => s.hasComment())
    if (!documented) undocumented.push(`${module.name}.${child.name}`)
  }
}
for (const name of undocumented) {
  app.logger.error(`${name} (Function) is exported without a doc comment: add /** what it does … @since */`)
}

if (app.logger.hasErrors() || app.logger.hasWarnings()) {
  console.error(
    `docs: ${app.logger.errorCount} errors, ${app.logger.warningCount} warnings. Every exported symbol of a ` +
      "public module needs a doc comment (`/** … @since 0.0.0 */`), and every {@link} must resolve."
  )
  process.exit(1)
}
if (check) {
  console.log("docs:check: every exported symbol is documented")
} else {
  await app.generateDocs(project, app.options.getValue("out"))
  console.log(`docs: written to ${app.options.getValue("out")}/index.html`)
}
