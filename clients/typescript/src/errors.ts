/**
 * Problem+json answers back to one error class per `code`, as the Python SDK does.
 *
 * The server renders every refusal as RFC 9457 problem+json with a `code`; here each code
 * has its class, in the server's own tree (a `CapReached` is an `InvariantViolation`), so
 * a caller catches exactly what the server raised. A code this client does not know (a
 * newer server's) is kept in `code`, on the broadest class of its HTTP status.
 *
 *     WorkLedgerError
 *     ├── InvalidInput (422) ─ IdempotencyKeyReused, UnknownPrerequisite, PrerequisiteCycle
 *     ├── Unauthorized (401), Forbidden (403) ─ NotHolder
 *     ├── NotFound (404)
 *     ├── InvariantViolation (409) ─ AttemptSuperseded, PrerequisitesUnfinished,
 *     │     AttemptLimitReached, BudgetExhausted, ExternalRefTaken, CapReached, Paused,
 *     │     ExclusiveKeyHeld, RampGateClosed
 *     ├── PayloadTooLarge (413), RateLimited (429), Unavailable (503) ─ Unreachable
 *     └── the HTTP layer's: BadRequest, MethodNotAllowed, UnsupportedMediaType,
 *           HeadersTooLarge, InternalError, HttpError
 */
import type { Problem } from "./generated/types.gen.js";

/** Codes that DESIGN §13 adds on branches not yet merged (typed by hand until then). */
export type PendingCode = "cap_reached" | "paused" | "exclusive_key_held" | "ramp_gate_closed";
export type ProblemCode = Problem["code"] | PendingCode;

/** The invariant of the 409 that means "the first request under this key still runs". */
export const IN_FLIGHT = "idempotency_key_in_flight";

export class WorkLedgerError extends Error {
  /** The server's code; for a code this client has no class for, that code, kept. */
  readonly code: string;
  readonly status: number;
  readonly detail: string;
  /** The ledger rule that refused the request (409s). */
  readonly invariant: string | null;
  readonly unitId: string | null;
  readonly state: string | null;
  /** The actions allowed next. */
  readonly allowed: readonly string[];
  /** The whole problem document, every extra field included (`waiting_on`, `fleet`, ...). */
  readonly problem: Readonly<Record<string, unknown>>;

  constructor(status: number, detail: string, problem: Record<string, unknown> = {}) {
    super(detail);
    this.name = new.target.name;
    this.status = status;
    this.detail = detail;
    const code = problem["code"];
    this.code = typeof code === "string" && code ? code : codeOf(new.target);
    this.invariant = stringOrNull(problem["invariant"]);
    this.unitId = stringOrNull(problem["unit_id"]);
    this.state = stringOrNull(problem["state"]);
    const allowed = problem["allowed"];
    this.allowed = Array.isArray(allowed) ? allowed.map(String) : [];
    this.problem = problem;
  }

  /** The rule that refused: the problem's `invariant`, else its code. */
  get rule(): string {
    return this.invariant ?? this.code;
  }

  override toString(): string {
    return `${this.code}: ${this.detail}`;
  }
}

function stringOrNull(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}

export class InvalidInput extends WorkLedgerError {}
export class IdempotencyKeyReused extends InvalidInput {}
export class UnknownPrerequisite extends InvalidInput {}
export class PrerequisiteCycle extends InvalidInput {}
export class BadRequest extends InvalidInput {}
/** A body its content type cannot decode (an OTLP export that is not OTLP). */
export class MalformedBody extends InvalidInput {}
export class Unauthorized extends WorkLedgerError {}
export class Forbidden extends WorkLedgerError {}
export class NotHolder extends Forbidden {}
export class NotFound extends WorkLedgerError {}
export class MethodNotAllowed extends WorkLedgerError {}
export class InvariantViolation extends WorkLedgerError {}
export class AttemptSuperseded extends InvariantViolation {}
export class PrerequisitesUnfinished extends InvariantViolation {}
export class AttemptLimitReached extends InvariantViolation {}
export class BudgetExhausted extends InvariantViolation {}
export class ExternalRefTaken extends InvariantViolation {}
/** A named claim in a scope at its `max_live` (DESIGN §13): stop, not retry. */
export class CapReached extends InvariantViolation {}
/** A named claim in a paused scope: stop, not retry. */
export class Paused extends InvariantViolation {}
export class ExclusiveKeyHeld extends InvariantViolation {}
export class RampGateClosed extends InvariantViolation {}
export class PayloadTooLarge extends WorkLedgerError {}
export class UnsupportedMediaType extends WorkLedgerError {}
export class HeadersTooLarge extends WorkLedgerError {}
export class RateLimited extends WorkLedgerError {}
export class Unavailable extends WorkLedgerError {}
/** No base URL answered, even after every retry (client-side only). */
export class Unreachable extends Unavailable {}
export class InternalError extends WorkLedgerError {}
export class HttpError extends WorkLedgerError {}

type ErrorClass = new (status: number, detail: string, problem?: Record<string, unknown>) => WorkLedgerError;

/** One class per code the server sends: tsc refuses this table when a code lacks one. */
export const ERROR_CLASSES: { readonly [K in ProblemCode]: ErrorClass } = {
  work_ledger_error: WorkLedgerError,
  invalid_input: InvalidInput,
  idempotency_key_reused: IdempotencyKeyReused,
  unknown_prerequisite: UnknownPrerequisite,
  prerequisite_cycle: PrerequisiteCycle,
  bad_request: BadRequest,
  malformed_body: MalformedBody,
  unauthorized: Unauthorized,
  forbidden: Forbidden,
  not_holder: NotHolder,
  not_found: NotFound,
  method_not_allowed: MethodNotAllowed,
  invariant_violation: InvariantViolation,
  attempt_superseded: AttemptSuperseded,
  prerequisites_unfinished: PrerequisitesUnfinished,
  attempt_limit_reached: AttemptLimitReached,
  budget_exhausted: BudgetExhausted,
  external_ref_taken: ExternalRefTaken,
  cap_reached: CapReached,
  paused: Paused,
  exclusive_key_held: ExclusiveKeyHeld,
  ramp_gate_closed: RampGateClosed,
  payload_too_large: PayloadTooLarge,
  unsupported_media_type: UnsupportedMediaType,
  headers_too_large: HeadersTooLarge,
  rate_limited: RateLimited,
  unavailable: Unavailable,
  internal_error: InternalError,
  http_error: HttpError,
};

const BY_STATUS: Readonly<Record<number, ErrorClass>> = {
  400: InvalidInput,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: InvariantViolation,
  413: PayloadTooLarge,
  422: InvalidInput,
  429: RateLimited,
  503: Unavailable,
};

function codeOf(cls: abstract new (...args: never[]) => WorkLedgerError): string {
  for (const [code, known] of Object.entries(ERROR_CLASSES)) {
    if (known === cls) return code;
  }
  return cls === Unreachable ? "unreachable" : "work_ledger_error";
}

function problemCode(problem: Record<string, unknown>): string | null {
  const code = problem["code"];
  if (typeof code === "string" && code) return code;
  const kind = problem["type"];
  if (typeof kind === "string" && kind && kind !== "about:blank") {
    return kind.split(/[#/:]/).pop() || null;
  }
  return null;
}

/** The class for a problem's code, else the broadest class for its HTTP status. */
export function errorClass(code: string | null, status: number): ErrorClass {
  if (code !== null && Object.hasOwn(ERROR_CLASSES, code)) {
    return ERROR_CLASSES[code as ProblemCode];
  }
  return BY_STATUS[status] ?? WorkLedgerError;
}

/** A typed error from a non-2xx answer (problem+json, or anything else). */
export function errorFromResponse(status: number, body: string): WorkLedgerError {
  let parsed: unknown = null;
  try {
    parsed = body ? JSON.parse(body) : null;
  } catch {
    parsed = null;
  }
  const problem: Record<string, unknown> =
    parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)
      ? { ...(parsed as Record<string, unknown>) }
      : {};
  const code = problemCode(problem);
  if (code !== null) problem["code"] = code;
  let detail = problem["detail"] ?? problem["title"];
  if (typeof detail !== "string" || !detail) {
    const text = body.trim().slice(0, 500);
    detail = `the server answered HTTP ${status}` + (text ? `: ${text}` : "");
  }
  const cls = errorClass(code, status);
  return new cls(status, detail as string, problem);
}
