import { expect, test } from "vitest";
import { EXCLUDED_OPERATIONS, METHODS, OPERATIONS, WorkLedger } from "../../src/index.js";

test("every operation of the contract has a method, and each names a real one", () => {
  const wl = new WorkLedger({ url: "http://a:1" });
  const excluded: readonly string[] = EXCLUDED_OPERATIONS;
  const wanted = Object.keys(OPERATIONS).filter((id) => !excluded.includes(id));
  expect(Object.keys(METHODS).sort()).toEqual([...new Set(wanted)].sort());
  for (const [id, path] of Object.entries(METHODS)) {
    const [resource, method] = path.split(".") as [string, string];
    const target = (wl as unknown as Record<string, Record<string, unknown>>)[resource];
    expect(typeof target?.[method], `${id} → ${path}`).toBe("function");
  }
});
