/**
 * @envtrain/harness — see docs/architecture.md for what this package owns. Its modules arrive with their issues.
 *
 * @since 0.0.0
 */
export {}
