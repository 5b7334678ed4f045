// Entry point of the `envtrain` binary: bin/envtrain.mjs imports its build (dist/bin.js); `npm run envtrain` runs it
// from the sources under tsx.
import * as Cli from "./Cli.js"
import * as Main from "./Main.js"

Main.run(Cli.cli(process.argv))
