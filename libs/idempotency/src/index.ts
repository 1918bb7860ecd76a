export * from './errors';
export * from './key';
export * from './store';
export * from './redis-tier';
export { DUPLICATE_WAIT_MS, IdempotencyOutcome, type CommandScope, type IdempotencyPluginOptions, type IdempotentCommand, type IdempotentOptions, type IdempotentResult, type TransactionBody } from './options';
export { IDEMPOTENCY_KEY_HEADER, IDEMPOTENT_REPLAYED_HEADER, PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_BASE, idempotencyProblem, type IdempotencyProblem } from './problem';
export * from './plugin';
