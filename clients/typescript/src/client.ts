/**
 * `WorkLedger`: the thin I/O layer over `core.ts`. It sends what a `Sending` says with
 * the global `fetch` (or an injected one), and sleeps as long as it says. Resources
 * (`units`, `claims`, ...) build the calls; nothing here decides a retry.
 */
import { AGENT_HEADER, Endpoints, Sending, type Call } from "./core.js";
import { WorkLedgerError } from "./errors.js";
import {
  Attempts,
  Budgets,
  Bulk,
  Claims,
  Controls,
  Events,
  Health,
  Projection,
  Questions,
  Units,
} from "./resources.js";

export type Fetch = (input: string, init: RequestInit) => Promise<Response>;

export interface ClientOptions {
  /** One base URL, or several (a list, or comma-separated) to fail over between.
   * Default: WL_URL, else http://127.0.0.1:4001. */
  url?: string | readonly string[];
  /** A token from `work-ledger token create`. Default: WL_TOKEN. */
  token?: string;
  /** Act as a sub-agent: the server records `principal/agent`. */
  agent?: string;
  /** Per-request timeout in ms (a long-poll adds its wait and a margin). Default 30 s. */
  timeoutMs?: number;
  /** Back-off rounds after every URL failed in a row. Default 4. */
  retries?: number;
  /** The first back-off in ms (doubling, jittered, capped at 5 s). Default 200. */
  backoffMs?: number;
  /** The `fetch` to send with (tests inject one). Default: the global `fetch`. */
  fetch?: Fetch;
  /** How to wait between tries (tests inject one). */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Jitter's source, in [0, 1). */
  random?: () => number;
}

/** Per-call options: a caller's AbortSignal stops the call (and its retries) at once. */
export interface CallOptions {
  signal?: AbortSignal;
}

/** Per-write options: `key` reuses an Idempotency-Key of your own (default: a new one). */
export interface WriteOptions extends CallOptions {
  key?: string;
}

const DEFAULT_URL = "http://127.0.0.1:4001";

function env(name: string): string | undefined {
  const value = globalThis.process?.env?.[name];
  return value ? value : undefined;
}

function abortable(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export class WorkLedger {
  readonly endpoints: Endpoints;
  readonly timeoutMs: number;
  readonly retries: number;
  readonly backoffMs: number;
  readonly random: () => number;
  readonly units: Units;
  readonly claims: Claims;
  readonly attempts: Attempts;
  readonly questions: Questions;
  readonly events: Events;
  readonly projection: Projection;
  readonly budgets: Budgets;
  readonly controls: Controls;
  readonly bulk: Bulk;
  readonly health: Health;
  readonly #headers: Record<string, string>;
  readonly #fetch: Fetch;
  readonly #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;

  constructor(options: ClientOptions = {}) {
    this.endpoints = new Endpoints(options.url ?? env("WL_URL") ?? DEFAULT_URL);
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.retries = options.retries ?? 4;
    this.backoffMs = options.backoffMs ?? 200;
    this.random = options.random ?? Math.random;
    this.#fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.#sleep = options.sleep ?? abortable;
    const token = options.token ?? env("WL_TOKEN");
    this.#headers = { Accept: "application/json" };
    if (token) this.#headers["Authorization"] = `Bearer ${token}`;
    if (options.agent) this.#headers[AGENT_HEADER] = options.agent;
    this.units = new Units(this);
    this.claims = new Claims(this);
    this.attempts = new Attempts(this);
    this.questions = new Questions(this);
    this.events = new Events(this);
    this.projection = new Projection(this);
    this.budgets = new Budgets(this);
    this.controls = new Controls(this);
    this.bulk = new Bulk(this);
    this.health = new Health(this);
  }

  /** The base URL in use (the first until one fails). */
  get url(): string {
    return this.endpoints.current;
  }

  /** Send one call through its retries and failovers; the parsed answer or a typed error. */
  async send<T>(call: Call<T>, options: CallOptions = {}): Promise<T> {
    const { signal } = options;
    const sending = new Sending(call, this);
    for (;;) {
      signal?.throwIfAborted();
      const request = sending.request;
      const timeout = AbortSignal.timeout(request.timeoutMs);
      let status: number;
      let body: string;
      let retryAfter: string | null;
      try {
        const response = await this.#fetch(request.url, {
          method: request.method,
          headers: { ...this.#headers, ...request.headers },
          body: request.body,
          signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
        });
        status = response.status;
        retryAfter = response.headers.get("Retry-After");
        body = await response.text();
      } catch (error) {
        if (signal?.aborted) throw signal.reason; // the caller's stop: never retried
        if (error instanceof WorkLedgerError) throw error;
        sending.failed(error); // throws Unreachable on the last try
        await this.#sleep(sending.delay(), signal);
        continue;
      }
      if (sending.answered(status, body, retryAfter)) return sending.result(status, body);
      await this.#sleep(sending.delay(), signal);
    }
  }
}
