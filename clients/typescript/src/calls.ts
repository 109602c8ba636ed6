/** How a resource turns a method into a `Call`: paths, keys, bodies, long-poll waits. */
import { newKey, type Call, type Query } from "./core.js";
import type { CallOptions, WriteOptions } from "./client.js";
import { paginate, type Page } from "./pages.js";

/** What a resource needs of the client: sending one call. */
export interface Sender {
  send<T>(call: Call<T>, options?: CallOptions): Promise<T>;
}

/** A unit's UUID or external_ref, as one path segment (refs hold slashes). */
export function ref(unit: string): string {
  return encodeURIComponent(unit);
}

function json<T>(body: string): T {
  return JSON.parse(body) as T;
}

function withoutUndefined(body: object): Record<string, unknown> {
  return Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined));
}

export abstract class Resource {
  constructor(protected readonly client: Sender) {}

  /** A write: one Idempotency-Key for this logical write, repeated on every retry. */
  protected write<T>(path: string, body: object, options: WriteOptions = {}, waitSeconds = 0): Promise<T> {
    const call: Call<T> = {
      method: "POST",
      path,
      body: withoutUndefined(body),
      key: options.key ?? newKey(),
      waitSeconds,
      parse: json<T>,
    };
    return this.client.send(call, options);
  }

  protected read<T>(path: string, query: Query = {}, options: CallOptions = {}): Promise<T> {
    const wait = query["wait_seconds"];
    const call: Call<T> = {
      method: "GET",
      path,
      query,
      waitSeconds: typeof wait === "number" ? wait : 0,
      parse: json<T>,
    };
    return this.client.send(call, options);
  }

  protected text(path: string, options: CallOptions = {}): Promise<string> {
    return this.client.send({ method: "GET", path, parse: (body) => body }, options);
  }

  /** Every item of a keyset listing, page after page. */
  protected pages<T>(path: string, query: Query, options: CallOptions = {}): AsyncGenerator<T> {
    return paginate((cursor) => this.read<Page<T>>(path, { ...query, cursor }, options));
  }
}
