/**
 * One resource per group of operations; each method names its operationId. Bodies and
 * answers are the generated wire types (snake_case, as on the wire); `key` reuses an
 * Idempotency-Key of your own, `signal` stops a call and its retries.
 */
import type { CallOptions, WriteOptions } from "./client.js";
import { Resource, ref } from "./calls.js";
import type * as W from "./generated/types.gen.js";

type Q<T extends { query?: unknown }> = NonNullable<T["query"]>;
type Body<T extends { body?: unknown }> = NonNullable<T["body"]>;
type Item<T extends { items: unknown[] }> = T["items"][number];
type Attempt = { attempt_id?: string | null };

export class Units extends Resource {
  /** registerUnits: up to 1000 units; ones already known count as `existing`. */
  register(units: W.NewUnitIn[], options?: WriteOptions): Promise<W.RegisterUnitsResponse> {
    return this.write("/units", { units }, options);
  }

  /** listUnits: one keyset page. */
  list(query: Q<W.ListUnitsData> = {}, options?: CallOptions): Promise<W.ListUnitsResponse> {
    return this.read("/units", query, options);
  }

  /** Every unit the query matches, following `next_cursor`. */
  iter(query: Q<W.ListUnitsData> = {}, options?: CallOptions): AsyncGenerator<Item<W.UnitPage>> {
    return this.pages("/units", query, options);
  }

  /** getUnit: the unit with its attempts, questions, requirements and children. */
  get(unit: string, options?: CallOptions): Promise<W.GetUnitResponse> {
    return this.read(`/units/${ref(unit)}`, {}, options);
  }

  /** transitionUnit: to in_progress (start), verified (with evidence) or ready (release). */
  transition(
    unit: string,
    body: Body<W.TransitionUnitData>,
    options?: WriteOptions,
  ): Promise<W.TransitionUnitResponse> {
    return this.write(`/units/${ref(unit)}/transition`, body, options);
  }

  start(unit: string, fence: Attempt = {}, options?: WriteOptions): Promise<W.TransitionUnitResponse> {
    return this.transition(unit, { to: "in_progress", ...fence }, options);
  }

  verify(
    unit: string,
    evidenceUrl: string,
    fence: Attempt & { reason?: string },
    options?: WriteOptions,
  ): Promise<W.TransitionUnitResponse> {
    return this.transition(unit, { to: "verified", evidence_url: evidenceUrl, ...fence }, options);
  }

  /** Give the unit back (outcome failed or abandoned). */
  release(
    unit: string,
    outcome: "failed" | "abandoned",
    fence: Attempt & { reason?: string } = {},
    options?: WriteOptions,
  ): Promise<W.TransitionUnitResponse> {
    return this.transition(unit, { to: "ready", outcome, ...fence }, options);
  }

  /** blockUnit: ask a question; the unit waits for its answer. */
  block(unit: string, body: Body<W.BlockUnitData>, options?: WriteOptions): Promise<W.BlockUnitResponse> {
    return this.write(`/units/${ref(unit)}/block`, body, options);
  }

  /** unblockUnit: answer the open question; the holder goes on. */
  unblock(
    unit: string,
    body: Body<W.UnblockUnitData>,
    options?: WriteOptions,
  ): Promise<W.UnblockUnitResponse> {
    return this.write(`/units/${ref(unit)}/unblock`, body, options);
  }

  /** disposeUnit: close it MIGRATED, DROPPED, DEFERRED or DEAD. */
  dispose(
    unit: string,
    body: Body<W.DisposeUnitData>,
    options?: WriteOptions,
  ): Promise<W.DisposeUnitResponse> {
    return this.write(`/units/${ref(unit)}/dispose`, body, options);
  }

  /** splitUnit: register children; the parent waits for them. */
  split(unit: string, body: Body<W.SplitUnitData>, options?: WriteOptions): Promise<W.SplitUnitResponse> {
    return this.write(`/units/${ref(unit)}/split`, body, options);
  }

  /** waivePrerequisite: drop one requirement of a waiting unit. */
  waive(
    unit: string,
    body: Body<W.WaivePrerequisiteData>,
    options?: WriteOptions,
  ): Promise<W.WaivePrerequisiteResponse> {
    return this.write(`/units/${ref(unit)}/waive`, body, options);
  }

  /** listUnitEvents: one page of the unit's events, newest first. */
  events(
    unit: string,
    query: Q<W.ListUnitEventsData> = {},
    options?: CallOptions,
  ): Promise<W.ListUnitEventsResponse> {
    return this.read(`/units/${ref(unit)}/events`, query, options);
  }

  iterEvents(
    unit: string,
    query: Q<W.ListUnitEventsData> = {},
    options?: CallOptions,
  ): AsyncGenerator<Item<W.EventPage>> {
    return this.pages(`/units/${ref(unit)}/events`, query, options);
  }
}

export class Claims extends Resource {
  /** claimNext: the oldest claimable unit, or the one you hold (`resumed`). With
   * `wait_seconds` a long-poll: the request waits that long plus a margin. */
  next(body: Body<W.ClaimNextData> = {}, options?: WriteOptions): Promise<W.ClaimNextResponse> {
    return this.write("/units/claim", body, options, body.wait_seconds ?? 0);
  }

  /** claimUnit: this unit, or a 409 naming why not. */
  unit(unit: string, body: Body<W.ClaimUnitData> = {}, options?: WriteOptions): Promise<W.ClaimUnitResponse> {
    return this.write(`/units/${ref(unit)}/claim`, body, options);
  }
}

export class Attempts extends Resource {
  /** heartbeat: extend the lease; a 409 once the attempt is no longer live (stop). */
  heartbeat(
    attemptId: string,
    body: Body<W.HeartbeatData> = {},
    options?: WriteOptions,
  ): Promise<W.HeartbeatResponse> {
    return this.write(`/attempts/${ref(attemptId)}/heartbeat`, body, options);
  }

  /** recordCost: cents and tokens spent by this attempt. */
  recordCost(
    attemptId: string,
    body: Body<W.RecordCostData>,
    options?: WriteOptions,
  ): Promise<W.RecordCostResponse> {
    return this.write(`/attempts/${ref(attemptId)}/cost`, body, options);
  }
}

export class Questions extends Resource {
  /** listQuestions: one page; with `wait_seconds` a long-poll for the first match. */
  list(query: Q<W.ListQuestionsData> = {}, options?: CallOptions): Promise<W.ListQuestionsResponse> {
    return this.read("/questions", query, options);
  }

  iter(query: Q<W.ListQuestionsData> = {}, options?: CallOptions): AsyncGenerator<Item<W.QuestionPage>> {
    return this.pages("/questions", query, options);
  }

  /** Open questions not yet routed to a human queue, oldest first (triage's to-do). */
  unrouted(
    query: Omit<Q<W.ListQuestionsData>, "status" | "routed"> = {},
    options?: CallOptions,
  ): Promise<W.ListQuestionsResponse> {
    return this.list({ ...query, status: "open", routed: false }, options);
  }

  /** getQuestion: with `wait_seconds`, waits for its answer. */
  get(
    questionId: string,
    query: Q<W.GetQuestionData> = {},
    options?: CallOptions,
  ): Promise<W.GetQuestionResponse> {
    return this.read(`/questions/${ref(questionId)}`, query, options);
  }

  /** cancelQuestion */
  cancel(
    questionId: string,
    body: Body<W.CancelQuestionData> = {},
    options?: WriteOptions,
  ): Promise<W.CancelQuestionResponse> {
    return this.write(`/questions/${ref(questionId)}/cancel`, body, options);
  }

  /** routeQuestion: record the human queue's task id. */
  route(
    questionId: string,
    body: Body<W.RouteQuestionData>,
    options?: WriteOptions,
  ): Promise<W.RouteQuestionResponse> {
    return this.write(`/questions/${ref(questionId)}/route`, body, options);
  }
}

export class Events extends Resource {
  /** listEvents: one page of every unit's events, newest first. */
  list(query: Q<W.ListEventsData> = {}, options?: CallOptions): Promise<W.ListEventsResponse> {
    return this.read("/events", query, options);
  }

  iter(query: Q<W.ListEventsData> = {}, options?: CallOptions): AsyncGenerator<Item<W.EventPage>> {
    return this.pages("/events", query, options);
  }
}

export class Projection extends Resource {
  /** projectEvents: Temporal events, exactly once by `source_event_id`. */
  ingest(body: Body<W.ProjectEventsData>, options?: WriteOptions): Promise<W.ProjectEventsResponse> {
    return this.write("/projection/events", body, options);
  }
}

export class Budgets extends Resource {
  /** setBudget: the cap of a fleet, or of one domain of it. */
  set(body: Body<W.SetBudgetData>, options?: WriteOptions): Promise<W.SetBudgetResponse> {
    return this.write("/budgets", body, options);
  }

  /** listBudgets */
  list(options?: CallOptions): Promise<W.ListBudgetsResponse> {
    return this.read("/budgets", {}, options);
  }
}

export class Controls extends Resource {
  /** setControls: cap, pause or gate a fleet or one domain of it (operator). */
  set(body: Body<W.SetControlsData>, options?: WriteOptions): Promise<W.SetControlsResponse> {
    return this.write("/controls", body, options);
  }

  /** listControls: every controlled scope, with its live and held units. */
  list(options?: CallOptions): Promise<W.ListControlsResponse> {
    return this.read("/controls", {}, options);
  }

  /** listControlEvents: one page, newest first. */
  events(
    query: Q<W.ListControlEventsData> = {},
    options?: CallOptions,
  ): Promise<W.ListControlEventsResponse> {
    return this.read("/controls/events", query, options);
  }

  /** Every control event, following `next_cursor`. */
  iterEvents(
    query: Q<W.ListControlEventsData> = {},
    options?: CallOptions,
  ): AsyncGenerator<Item<W.ControlEventPage>> {
    return this.pages("/controls/events", query, options);
  }
}

export class Bulk extends Resource {
  /** bulkUnits: dispose or release by filter; a dry run unless `dry_run: false`. */
  run(body: Body<W.BulkUnitsData>, options?: WriteOptions): Promise<W.BulkUnitsResponse> {
    return this.write("/units/bulk", body, options);
  }
}

export class Health extends Resource {
  /** healthz: the process answers. */
  healthz(options?: CallOptions): Promise<W.HealthzResponse> {
    return this.read("/healthz", {}, options);
  }

  /** readyz: the process reaches its database. */
  readyz(options?: CallOptions): Promise<W.ReadyzResponse> {
    return this.read("/readyz", {}, options);
  }

  /** metrics: the Prometheus text (with a token when the server asks for one). */
  metrics(options?: CallOptions): Promise<string> {
    return this.text("/metrics", options);
  }
}
