/**
 * @envtrain/text — the tokenizer (with its BPE trainer) and the chat template, shared by the model (`@envtrain/gpu`)
 * and chat rendering (`@envtrain/rollout`); no device, and none of our other packages.
 *
 * @since 0.0.0
 */
export * as ChatTemplate from "./ChatTemplate.js"
export * as Random from "./Random.js"
export * as Tokenizer from "./Tokenizer.js"
