export { WorkLedger, type ClientOptions, type CallOptions, type WriteOptions, type Fetch } from "./client.js";
export {
  Endpoints,
  Sending,
  newKey,
  retryable,
  retryAfterMs,
  LONG_POLL_MARGIN_MS,
  type Call,
  type Policy,
} from "./core.js";
export * from "./errors.js";
export { paginate, type Page } from "./pages.js";
export { METHODS, EXCLUDED_OPERATIONS } from "./methods.js";
export { OPERATIONS, type OperationId } from "./generated/operations.gen.js";
export type * from "./generated/types.gen.js";
