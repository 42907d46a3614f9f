import { describe, expect, test } from "bun:test";
import { isId64, isOrderId, MAX_ID64, OrderId } from "../src/util/ids.ts";

describe("the one 64-bit id rule (util/ids.ts)", () => {
  const good = ["1", "42", "9007199254740993", String(MAX_ID64)];
  const bad = [
    "",
    "0",
    "01",
    "-1",
    "+1",
    " 1",
    "1 ",
    "1.0",
    "1e3",
    "0x10",
    "12a",
    "9223372036854775808",
    "9999999999999999999",
    "10000000000000000000",
  ];

  test("accepts canonical decimals from 1 to 2^63 − 1", () => {
    for (const s of good) {
      expect(isId64(s)).toBe(true);
      expect(isOrderId(s)).toBe(true);
      expect(OrderId.safeParse(s).success).toBe(true);
    }
  });

  test("refuses anything else, with 'not an order id' and without throwing", () => {
    for (const s of bad) {
      expect(isId64(s)).toBe(false);
      const res = OrderId.safeParse(s);
      expect(res.success).toBe(false);
      expect(res.error?.issues.every((i) => i.message === "not an order id")).toBe(true);
    }
    expect(OrderId.safeParse(123).success).toBe(false);
  });
});
