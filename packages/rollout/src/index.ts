/**
 * @envtrain/rollout — the Policy service, chat rendering with tools, tool-call parsing, the multi-turn episode loop
 * with exact token bookkeeping, and rollouts as supervised streams of GRPO groups.
 *
 * The local GPU policy is a separate entry point, `@envtrain/rollout/LocalPolicy`, so that importing the rest does
 * not load the WebGPU runtime.
 *
 * @since 0.0.0
 */
export * as ChatRenderer from "./ChatRenderer.js"
export * as Episode from "./Episode.js"
export * as Policy from "./Policy.js"
export * as PolicyServer from "./PolicyServer.js"
export * as Recording from "./Recording.js"
export * as RemoteSession from "./RemoteSession.js"
export * as Rollout from "./Rollout.js"
export * as ToolCallParser from "./ToolCallParser.js"
export * as TrainingTemplate from "./TrainingTemplate.js"
export * as WeightStore from "./WeightStore.js"
