import { expect, test } from "vitest";
import { WorkLedger } from "../../src/index.js";
import { ok, scripted } from "./scripted.js";

test("for await follows next_cursor until it is null", async () => {
  const { fetch, sent } = scripted(
    ok({ items: [{ id: "1" }, { id: "2" }], next_cursor: "c2" }),
    ok({ items: [{ id: "3" }], next_cursor: "c3" }),
    ok({ items: [], next_cursor: null }),
  );
  const wl = new WorkLedger({ url: "http://a:1", fetch });
  const ids: string[] = [];
  for await (const unit of wl.units.iter({ domain: "orders", limit: 2 })) ids.push(unit.id);
  expect(ids).toEqual(["1", "2", "3"]);
  const queries = sent.map((s) => new URL(s.url).search);
  expect(queries).toEqual([
    "?domain=orders&limit=2",
    "?domain=orders&limit=2&cursor=c2",
    "?domain=orders&limit=2&cursor=c3",
  ]);
});

test("breaking out of the loop fetches no further page", async () => {
  const { fetch, sent } = scripted(ok({ items: [{ id: "e1" }, { id: "e2" }], next_cursor: "next" }));
  const wl = new WorkLedger({ url: "http://a:1", fetch });
  for await (const event of wl.events.iter()) {
    expect(event.id).toBe("e1");
    break;
  }
  expect(sent).toHaveLength(1);
});
