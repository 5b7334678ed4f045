// Entry point of the `envtrain` binary (bin/envtrain.mjs loads it through tsx).
import * as Cli from "./Cli.js"
import * as Main from "./Main.js"

Main.run(Cli.cli(process.argv))
