/**
 * The sans-I/O core, as the Python SDK's `_sending.py`: one `Call` through its retries and
 * failovers. `client.ts` builds the request this says, sends it with `fetch`, and sleeps
 * as long as this says; every decision (which URL, retry or not, how long to wait, which
 * error) is made here, once.
 *
 * - A write carries one Idempotency-Key, made when the call is built and repeated on every
 *   retry and every replica, so the replica that takes a retry returns the first outcome.
 * - A network error or a 503 moves the call to the next base URL at once; once every URL
 *   failed in a row, it backs off before the next round (`retries` rounds).
 * - A 429 and the in-flight 409 (`invariant` idempotency_key_in_flight) are retried on the
 *   same URL after a back-off. Every other answer is final: an invariant's 409 is a stop.
 * - A back-off is jittered exponential (capped at 5 s), never shorter than Retry-After.
 */
import { IN_FLIGHT, Unreachable, errorFromResponse } from "./errors.js";

export const IDEMPOTENCY_HEADER = "Idempotency-Key";
export const AGENT_HEADER = "X-WL-Agent";
export const REPLAYED_HEADER = "Idempotent-Replayed";
/** Added to a long-poll's `wait_seconds`: the server answers at the deadline, not before. */
export const LONG_POLL_MARGIN_MS = 10_000;
const MAX_BACKOFF_MS = 5_000;
const MAX_RETRY_AFTER_MS = 60_000;

export type Query = Record<string, string | number | boolean | null | undefined>;

/** One request: what to send and how to read the answer. */
export interface Call<T> {
  readonly method: "GET" | "POST";
  readonly path: string;
  readonly query?: Query;
  readonly body?: unknown;
  /** The Idempotency-Key of a write, repeated on every retry and replica. */
  readonly key?: string;
  /** A long-poll's wait: the request's timeout grows by it (plus a margin). */
  readonly waitSeconds?: number;
  readonly parse: (body: string) => T;
}

export interface Policy {
  readonly endpoints: Endpoints;
  readonly timeoutMs: number;
  readonly retries: number;
  readonly backoffMs: number;
  readonly random: () => number;
}

export interface Request {
  readonly url: string;
  readonly method: string;
  readonly headers: Record<string, string>;
  readonly body: string | undefined;
  readonly timeoutMs: number;
}

/** The base URLs in order and the one in use, shared by every call of a client. */
export class Endpoints {
  readonly urls: readonly string[];
  #current = 0;

  constructor(urls: string | readonly string[]) {
    const parts = typeof urls === "string" ? urls.split(",") : urls;
    this.urls = parts.map((u) => u.trim().replace(/\/+$/, "")).filter((u) => u !== "");
    if (this.urls.length === 0) {
      throw new TypeError(
        "no server URL given: WL_URL (or url) is empty; name one or more base URLs, " +
          "e.g. WL_URL=https://ledger-a:4001,https://ledger-b:4001",
      );
    }
    for (const url of this.urls) {
      if (!/^https?:\/\/[^/]+/.test(url)) {
        throw new TypeError(`${JSON.stringify(url)} is not an http(s) base URL (WL_URL or url)`);
      }
    }
  }

  get current(): string {
    return this.urls[this.#current] as string;
  }

  get length(): number {
    return this.urls.length;
  }

  /** `url` did not answer: move past it (unless another call already did); the next. */
  failed(url: string): string {
    if (this.current === url) this.#current = (this.#current + 1) % this.urls.length;
    return this.current;
  }

  toString(): string {
    return this.urls.join(", ");
  }
}

/** A fresh Idempotency-Key for one logical write. */
export function newKey(): string {
  return globalThis.crypto.randomUUID();
}

/** Seconds (or an HTTP date) of a Retry-After header, as milliseconds; null if absent. */
export function retryAfterMs(value: string | null, now: number = Date.now()): number | null {
  if (value === null || value.trim() === "") return null;
  const seconds = Number(value);
  const ms = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(value) - now;
  return Number.isFinite(ms) ? Math.min(MAX_RETRY_AFTER_MS, Math.max(0, ms)) : null;
}

/** Whether an answer is worth the same request again (same key). */
export function retryable(status: number, body: string): boolean {
  return status === 503 || status === 429 || (status === 409 && body.includes(IN_FLIGHT));
}

function queryString(query: Query | undefined): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query ?? {})) {
    if (value !== null && value !== undefined) params.append(name, String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

/** One call through its retries, without the I/O. */
export class Sending<T> {
  tries = 0;
  /** Back-off rounds so far. */
  retry = 0;
  /** Base URLs moved past since the last back-off. */
  moved = 0;
  url: string;
  #failover = false;
  #retryAfterMs: number | null = null;

  constructor(
    readonly call: Call<T>,
    readonly policy: Policy,
  ) {
    this.url = policy.endpoints.current;
  }

  get request(): Request {
    const { call } = this;
    const headers: Record<string, string> = {};
    if (call.key !== undefined) headers[IDEMPOTENCY_HEADER] = call.key;
    if (call.method === "POST") headers["Content-Type"] = "application/json";
    const wait = call.waitSeconds ?? 0;
    return {
      url: this.url + call.path + queryString(call.query),
      method: call.method,
      headers,
      body: call.method === "POST" ? JSON.stringify(call.body ?? {}) : undefined,
      timeoutMs: this.policy.timeoutMs + (wait > 0 ? wait * 1000 + LONG_POLL_MARGIN_MS : 0),
    };
  }

  #last(failover: boolean): boolean {
    const moreUrls = failover && this.moved + 1 < this.policy.endpoints.length;
    return this.retry >= this.policy.retries && !moreUrls;
  }

  /** Whether this answer is final: a retryable one is retried until the last try. */
  answered(status: number, body: string, retryAfter: string | null = null): boolean {
    this.#failover = status === 503;
    this.#retryAfterMs = retryAfterMs(retryAfter);
    return !retryable(status, body) || this.#last(this.#failover);
  }

  /** The parsed answer of a 2xx; the typed error the server raised otherwise. */
  result(status: number, body: string): T {
    if (status >= 200 && status < 300) return this.call.parse(body);
    throw errorFromResponse(status, body);
  }

  /** A network error (or a timeout): throw `Unreachable` on the last try, else retry. */
  failed(error: unknown): void {
    this.#failover = true;
    this.#retryAfterMs = null;
    if (this.#last(true)) {
      const why = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      throw new Unreachable(
        503,
        `cannot reach the work-ledger server at ${this.policy.endpoints} (${why}) after ` +
          `${this.tries + 1} tries; check that \`work-ledger serve\` runs there and that ` +
          "WL_URL points at it",
        { code: "unreachable" },
      );
    }
  }

  /** How long to wait (ms) before the next try, and count it: none when moving on to
   * another base URL, a back-off (at least Retry-After) once every URL failed in a row. */
  delay(): number {
    this.tries += 1;
    const { endpoints } = this.policy;
    if (this.#failover && endpoints.length > 1) {
      this.url = endpoints.failed(this.url);
      this.moved += 1;
      if (this.moved < endpoints.length) return 0; // another replica may answer at once
    }
    const jitter = 0.5 + this.policy.random() * 0.5;
    const backoff = Math.min(MAX_BACKOFF_MS, this.policy.backoffMs * 2 ** this.retry) * jitter;
    this.retry += 1;
    this.moved = 0;
    return Math.max(backoff, this.#retryAfterMs ?? 0);
  }
}
