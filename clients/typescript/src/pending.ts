/**
 * Wire types of DESIGN §13's controls and bulk operations, typed by hand from the contract
 * until their routes are merged and `npm run generate` brings the generated ones; then
 * these become aliases of the generated types.
 */
import type { State } from "./generated/types.gen.js";

/** The operation ids of those routes (the coverage test expects a method for each). */
export const PENDING_OPERATIONS = ["setControls", "listControls", "listControlEvents", "bulkUnits"] as const;

export interface Gate {
  max_failed_share: number;
  last_attempts: number;
}

export interface ControlsIn {
  fleet: string;
  domain?: string | null;
  /** An integer 0..100000; null removes the cap; absent leaves it. */
  max_live?: number | null;
  paused?: boolean;
  gate?: Gate | null;
  reason: string;
  /** Raise a gated cap anyway (the control event records it). */
  force?: boolean;
}

export interface ControlsOut {
  fleet: string;
  domain: string | null;
  max_live: number | null;
  live: number;
  held: number;
  paused: boolean;
  paused_since: string | null;
  pause_reason: string | null;
  drained: boolean;
  gate: Gate | null;
  reason: string | null;
  updated_at: string;
}

export interface ControlsPage {
  items: ControlsOut[];
}

/** One change of a scope's controls: who, the scope, the fields before and after, why. */
export interface ControlEventOut {
  [field: string]: unknown;
}

export interface ControlEventPage {
  items: ControlEventOut[];
  next_cursor: string | null;
}

export interface BulkFilter {
  fleet: string;
  domain?: string | null;
  state?: State[];
  external_ref_prefix?: string;
  held_by?: string;
}

export interface BulkIn {
  filter: BulkFilter;
  action: "dispose" | "release";
  disposition?: "MIGRATED" | "DROPPED" | "DEFERRED" | "DEAD";
  reason: string;
  /** Default true: answers what the real run would do, changing nothing. */
  dry_run?: boolean;
  limit?: number;
}

export interface BulkOut {
  dry_run: boolean;
  matched: number;
  changed: { id: string; external_ref: string; from: State; to: State }[];
  skipped: { id: string; external_ref: string; reason: string }[];
}
