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
// The names these wire types had while the server declared each answer twice (a model
// and its `*Out` twin; issue 44): the same types, kept so that existing callers compile.
export type {
  Attempt as AttemptOut,
  Budget as BudgetOut,
  BulkChanged as BulkChangedOut,
  BulkResult as BulkOut,
  BulkSkipped as BulkSkippedOut,
  Claim as ClaimOut,
  ControlEvent as ControlEventOut,
  Event as EventOut,
  EventResult as EventResultOut,
  Question as QuestionOut,
  Registered as RegisteredOut,
  Unit as UnitOut,
  UnitAttempt as UnitAttemptOut,
  UnitAttempt as AttemptUnitOut,
  UnitOnly as DisposeOut,
  UnitQuestion as UnitQuestionOut,
} from "./generated/types.gen.js";
