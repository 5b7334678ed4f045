// Prints one plain closing line, "N passed, N failed, N skipped", from vitest's JSON report (and, with
// `--pytest FILE`, pytest's JUnit XML as well), and exits non-zero when any test failed or was skipped, or a
// report is missing (so a crashed runner can never look green, and a skipped test is never silent).
import { readFileSync } from "node:fs"

const args = process.argv.slice(2)
const read = (file, what) => {
  try {
    return readFileSync(file, "utf8")
  } catch (e) {
    console.error(`test summary: no readable ${what} report at ${file} (${e.message}); the test run did not finish.`)
    process.exit(1)
  }
}

let passed = 0, failed = 0, skipped = 0, ok = true
const pytestAt = args.indexOf("--pytest")
if (pytestAt >= 0) {
  const xml = read(args[pytestAt + 1], "pytest")
  const suite = /<testsuite\b[^>]*>/.exec(xml)?.[0] ?? ""
  const attr = (name) => Number(new RegExp(`\\b${name}="(\\d+)"`).exec(suite)?.[1] ?? "0")
  const total = attr("tests"), bad = attr("failures") + attr("errors"), skip = attr("skipped")
  passed += total - bad - skip
  failed += bad
  skipped += skip
  if (total === 0) ok = false
  args.splice(pytestAt, 2)
}
const file = args[0] ?? "build/vitest-report.json"
let report
try {
  report = JSON.parse(read(file, "vitest"))
} catch (e) {
  console.error(`test summary: the vitest report at ${file} is not JSON (${e.message}).`)
  process.exit(1)
}
passed += report.numPassedTests ?? 0
// A failed file counts once more only when none of its tests failed (it did not load, or a hook failed): counting
// every failed file as well, as before, said "3 failed" for one failed test.
const brokenFiles =
  (report.testResults ?? []).filter((f) =>
    f.status === "failed" && !(f.assertionResults ?? []).some((t) => t.status === "failed")
  ).length
failed += (report.numFailedTests ?? 0) + brokenFiles
skipped += (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0)
if (report.success === false || (report.numPassedTests ?? 0) === 0) ok = false
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`)
if (skipped > 0) console.error("test summary: skipped tests are failures here; install what they need instead.")
process.exit(failed > 0 || skipped > 0 || !ok ? 1 : 0)
