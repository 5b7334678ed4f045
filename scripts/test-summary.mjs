// Prints one plain closing line, "N passed, N failed, N skipped", from vitest's JSON report, and exits non-zero
// when any test failed or the report is missing (so a crashed runner can never look green).
import { readFileSync } from "node:fs"

const file = process.argv[2] ?? "build/vitest-report.json"
let report
try {
  report = JSON.parse(readFileSync(file, "utf8"))
} catch (e) {
  console.error(`test summary: no readable vitest report at ${file} (${e.message}); the test run did not finish.`)
  process.exit(1)
}
const passed = report.numPassedTests ?? 0
const failed = (report.numFailedTests ?? 0) + (report.numFailedTestSuites ?? 0)
const skipped = (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0)
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`)
process.exit(failed > 0 || report.success === false || passed === 0 ? 1 : 0)
