/**
 * @envtrain/env — environments as Layers, built-in environments, and the OpenEnv-compatible server and client.
 *
 * @since 0.0.0
 */
export * as Catch from "./Catch.js"
export * as Echo from "./Echo.js"
export * as Environment from "./Environment.js"
export * as OpenEnv from "./OpenEnv.js"
export * as Tool from "./Tool.js"
