/**
 * @envtrain/env — environments as Layers, built-in environments, and the OpenEnv-compatible server and client.
 *
 * @since 0.0.0
 */
export * as OpenEnv from "./OpenEnv.js"
