/**
 * @envtrain/env — environments as Layers, built-in environments, and the OpenEnv-compatible server and client.
 *
 * @since 0.0.0
 */
export * as Browser from "./Browser.js"
export * as BrowserGym from "./BrowserGym.js"
export * as Carla from "./Carla.js"
export * as Catch from "./Catch.js"
export * as Client from "./Client.js"
export * as Definition from "./Definition.js"
export * as Docker from "./Docker.js"
export * as Echo from "./Echo.js"
export * as Environment from "./Environment.js"
export * as JsonSchema from "./JsonSchema.js"
export * as Launcher from "./Launcher.js"
export * as MultiEnv from "./MultiEnv.js"
export * as OpenEnv from "./OpenEnv.js"
export * as Registry from "./Registry.js"
export * as Remote from "./Remote.js"
export * as Server from "./Server.js"
export * as ServerOptions from "./ServerOptions.js"
export * as ServerPool from "./ServerPool.js"
export * as Sudoku from "./Sudoku.js"
export * as TaskApi from "./TaskApi.js"
export * as Tool from "./Tool.js"
export * as Wire from "./Wire.js"
export * as Wordle from "./Wordle.js"
