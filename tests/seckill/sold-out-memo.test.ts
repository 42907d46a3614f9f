/**
 * The sold-out memo (services/seckill/memory.ts): once Redis said SOLD_OUT, an isolate answers later
 * attempts from memory — but only to callers not among the voucher's buyers, which it lists from
 * Redis once. A buyer who holds a unit this isolate never heard of (the reply went to another
 * isolate, or to one that was killed) asks Redis and is told DUPLICATE_ORDER, never SOLD_OUT.
 */
import { describe, expect, test } from "bun:test";
import { loginAs } from "../support/http.ts";
import { call } from "../support/http.ts";
import { createSeckill } from "../support/seckill.ts";
import { createTestApp } from "../support/stack.ts";

const ENV = { SECKILL_USER_LIMIT: "0", SECKILL_IP_LIMIT: "0", SOLD_OUT_MEMO_MS: "60000" };

describe("the sold-out memo", () => {
  test("answers SOLD_OUT from memory to a caller who holds nothing, and sends a holder it never heard of to Redis: DUPLICATE_ORDER", async () => {
    const a = await createTestApp(ENV);
    const b = await createTestApp(ENV);
    const { voucherId } = await createSeckill(a, { stock: 1 });
    const holder = await loginAs(a.app, a.deps);
    const late = await loginAs(b.app, b.deps);
    const later = await loginAs(b.app, b.deps);
    const seckill = `/api/voucher-order/seckill/${voucherId}`;

    // Isolate A sells the only unit; isolate B never hears of it.
    const bought = await call<string>(a.app, "POST", seckill, { token: holder.token });
    expect(bought.body.success).toBe(true);
    // B learns "sold out" from Redis, and lists the buyers in the background.
    expect((await call(b.app, "POST", seckill, { token: late.token })).body.code).toBe("SOLD_OUT");
    await b.settle();

    // A caller who holds nothing: from memory, no Redis command.
    const before = b.stack.rest.stats().commands;
    expect((await call(b.app, "POST", seckill, { token: later.token })).body.code).toBe("SOLD_OUT");
    expect(b.stack.rest.stats().commands).toBe(before);

    // The holder (a lost reply, retried on another isolate): not SOLD_OUT but their order.
    const retried = await call<string | null>(b.app, "POST", seckill, { token: holder.token });
    expect(retried.body.code).toBe("DUPLICATE_ORDER");
    await a.settle();
    await b.settle();
  });
});
