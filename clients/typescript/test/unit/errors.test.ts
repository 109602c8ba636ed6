import { expect, test } from "vitest";
import {
  BudgetExhausted,
  CapReached,
  ERROR_CLASSES,
  InvalidInput,
  InvariantViolation,
  NotFound,
  Paused,
  WorkLedgerError,
  errorFromResponse,
} from "../../src/index.js";

test("each code maps to its own class", () => {
  const classes = Object.values(ERROR_CLASSES);
  expect(new Set(classes).size).toBe(classes.length);
  for (const [code, cls] of Object.entries(ERROR_CLASSES)) {
    const error = errorFromResponse(409, JSON.stringify({ code, detail: "x" }));
    expect(error.constructor).toBe(cls);
    expect(error.code).toBe(code);
  }
});

test("§13's stop signals are invariant violations with their scope", () => {
  const body = { code: "cap_reached", detail: "at cap", fleet: "php", domain: null, max_live: 10, live: 10 };
  const error = errorFromResponse(409, JSON.stringify(body));
  expect(error).toBeInstanceOf(CapReached);
  expect(error).toBeInstanceOf(InvariantViolation);
  expect(error.problem["max_live"]).toBe(10);
  expect(errorFromResponse(409, '{"code":"paused","detail":"p"}')).toBeInstanceOf(Paused);
  expect(errorFromResponse(409, '{"code":"budget_exhausted","detail":"b"}')).toBeInstanceOf(BudgetExhausted);
});

test("an unknown code is kept, on the broadest class of its status", () => {
  const error = errorFromResponse(409, JSON.stringify({ code: "moon_phase_wrong", detail: "later" }));
  expect(error.constructor).toBe(InvariantViolation);
  expect(error.code).toBe("moon_phase_wrong");
  expect(error.rule).toBe("moon_phase_wrong");
});

test("the code comes from `type` when absent, and a body that is not JSON still makes an error", () => {
  expect(
    errorFromResponse(404, JSON.stringify({ type: "urn:work-ledger:problem:not_found" })),
  ).toBeInstanceOf(NotFound);
  const plain = errorFromResponse(422, "no");
  expect(plain).toBeInstanceOf(InvalidInput);
  expect(plain.detail).toBe("the server answered HTTP 422: no");
  const odd = errorFromResponse(418, "");
  expect(odd.constructor).toBe(WorkLedgerError);
  expect(odd.status).toBe(418);
});
