/**
 * Which method sends each operation of the contract. tsc refuses this table when a
 * generated operation id has no entry, and the coverage test calls each
 * entry; tests/client/test_client_coverage.py reads it from the Python side.
 */
import type { OperationId } from "./generated/operations.gen.js";

/**
 * Left out on purpose: `exportOtlpLogs` (POST /otlp/v1/logs) is for OpenTelemetry
 * exporters (Claude Code's telemetry, a Collector), which speak OTLP themselves.
 */
export const EXCLUDED_OPERATIONS = ["exportOtlpLogs"] as const;

type Covered = Exclude<OperationId, (typeof EXCLUDED_OPERATIONS)[number]>;

export const METHODS: { readonly [K in Covered]: string } = {
  blockUnit: "units.block",
  bulkUnits: "bulk.run",
  cancelQuestion: "questions.cancel",
  claimNext: "claims.next",
  claimUnit: "claims.unit",
  disposeUnit: "units.dispose",
  getQuestion: "questions.get",
  getUnit: "units.get",
  healthz: "health.healthz",
  heartbeat: "attempts.heartbeat",
  listBudgets: "budgets.list",
  listControlEvents: "controls.events",
  listControls: "controls.list",
  listEvents: "events.list",
  listQuestions: "questions.list",
  listUnitEvents: "units.events",
  listUnits: "units.list",
  metrics: "health.metrics",
  projectEvents: "projection.ingest",
  readyz: "health.readyz",
  recordCost: "attempts.recordCost",
  registerUnits: "units.register",
  routeQuestion: "questions.route",
  setBudget: "budgets.set",
  setControls: "controls.set",
  splitUnit: "units.split",
  transitionUnit: "units.transition",
  unblockUnit: "units.unblock",
  waivePrerequisite: "units.waive",
};
