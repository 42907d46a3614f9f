/**
 * A burst of signed refund webhooks larger than the database's connection pool, while every
 * settlement's `SELECT … FOR UPDATE` is held (its reply delayed by a fault proxy in front of the
 * PlanetScale stand-in, so the row lock is taken and the transaction stays open). The isolate
 * admits WEBHOOK_CONCURRENCY of them and refuses the rest with 503 + Retry-After; the admitted
 * ones are rolled back at their transaction deadline. Meanwhile other queries keep answering, and
 * MariaDB's own view shows no transaction older than its deadline plus a second. Redelivered
 * later, every refund is settled exactly once.
 */
import { describe, expect, test } from "bun:test";
import { createConnection } from "mysql2/promise";
import { DEFAULT_CONNECTION_LIMIT } from "../../scripts/stack/planetscale-http.ts";
import { startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { signWebhook } from "../../src/payments/signature.ts";
import { PAYMENT_WEBHOOK_PATH } from "../../src/queue/messages.ts";
import { eventually, getStack, serveTestApp, type ServedApp } from "../support/stack.ts";
import { userIds } from "../support/seckill.ts";

/** Each statement's own deadline is longer than the transaction's: the transaction's ends them. */
const TX_DEADLINE_MS = 1_000;
const CONCURRENCY = 8;
/** Deliveries in the burst: more than the stand-in's MariaDB pool, two per refund (a duplicate each). */
const BURST = DEFAULT_CONNECTION_LIMIT + 32;
const REFUNDS = BURST / 2;
const Status = { refunding: 5, refunded: 6 } as const;
const RefundStatus = { requested: 1, succeeded: 2 } as const;
/** innodb_trx is a cache InnoDB refreshes only after 100 ms without a read: poll slower than that. */
const POLL_MS = 200;

/** A random positive 63-bit id (18 digits). */
function randomId(): string {
  const digits = [...crypto.getRandomValues(new Uint8Array(17))].map((b) => b % 10).join("");
  return `${1 + ((crypto.getRandomValues(new Uint8Array(1))[0] as number) % 9)}${digits}`;
}

interface Delivery {
  status: number;
  retryAfter: string | null;
  code?: string;
  errorMsg?: string;
  outcome?: string;
}

/** A signed refund.succeeded webhook over HTTP, as the provider sends it. */
async function deliver(t: ServedApp, refundId: string, signature?: string): Promise<Delivery> {
  const body = JSON.stringify({ type: "refund.succeeded", refundId, providerRef: `lr_${refundId}` });
  const sig = signature ?? (await signWebhook(t.deps.config.PAYMENT_WEBHOOK_SECRET, body, Date.now()));
  const res = await fetch(`${t.url}${PAYMENT_WEBHOOK_PATH}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-payment-signature": sig },
    body,
  });
  const json = (await res.json()) as { code?: string; errorMsg?: string; data?: { outcome?: string } };
  return {
    status: res.status,
    retryAfter: res.headers.get("retry-after"),
    code: json.code,
    errorMsg: json.errorMsg,
    outcome: json.data?.outcome,
  };
}

describe("a burst of refund webhooks larger than the database pool", () => {
  test("is bounded per isolate, rolled back at its deadline, starves no other query, and settles each refund once on retry", async () => {
    const stack = await getStack();
    const proxy = startFaultProxy(stack.env.DATABASE_URL as string);
    const t = await serveTestApp({
      DATABASE_URL: proxy.url,
      LOCAL_PAYMENT_DELAY_MS: "0",
      MYSQL_TIMEOUT_MS: "5000",
      MYSQL_TRANSACTION_TIMEOUT_MS: String(TX_DEADLINE_MS),
      WEBHOOK_CONCURRENCY: String(CONCURRENCY),
    });
    const direct = await createConnection({
      host: stack.mysql.host,
      port: stack.mysql.port,
      user: stack.mysql.user,
      password: stack.mysql.password,
      database: stack.database,
    });
    try {
      // Refunds awaiting the provider's confirmation: order refunding, payment succeeded, refund requested.
      const users = userIds(REFUNDS);
      const refunds = users.map((userId) => ({ userId, orderId: randomId(), paymentId: randomId(), id: randomId() }));
      await direct.query("INSERT INTO tb_voucher_order (id, user_id, voucher_id, status) VALUES ?", [
        refunds.map((r) => [r.orderId, r.userId, 1, Status.refunding]),
      ]);
      await direct.query("INSERT INTO tb_payment (id, order_id, user_id, amount, status) VALUES ?", [
        refunds.map((r) => [r.paymentId, r.orderId, r.userId, 4200, 2]),
      ]);
      await direct.query(
        "INSERT INTO tb_refund (id, payment_id, order_id, amount, reason, status, attempts, next_attempt_at) VALUES ?",
        [refunds.map((r) => [r.id, r.paymentId, r.orderId, 4200, "paid-after-close", RefundStatus.requested, 1, null])],
      );

      // Every settlement's row lock is taken, and its answer held far past the deadline.
      proxy.set({ kind: "replyDelay", ms: 20_000, match: "FOR UPDATE" });

      /**
       * Transactions of this database open now, with their age in whole seconds (MariaDB's clock).
       * InnoDB refreshes innodb_trx only when it was not read for 100 ms: polled every POLL_MS.
       */
      const openTransactions = async (): Promise<number[]> => {
        const [rows] = await direct.query(
          `SELECT TIMESTAMPDIFF(SECOND, t.trx_started, NOW()) AS age
             FROM information_schema.innodb_trx t
             JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
            WHERE p.db = ? AND p.id <> CONNECTION_ID()`,
          [stack.database],
        );
        return (rows as Array<{ age: number }>).map((r) => Number(r.age));
      };
      // trx_started has whole seconds: one more second of slack for the rounding.
      const maxAgeSeconds = Math.ceil(TX_DEADLINE_MS / 1000) + 1 + 1;
      const ages: number[] = [];
      const probes: Array<{ ok: boolean; err?: string }> = [];
      const observe = async () => {
        ages.push(...(await openTransactions()));
        try {
          // A plain query through the app's own MySQL port (guard, breaker, the stand-in's pool).
          const r = await t.deps.db.execute("SELECT 1 AS one");
          probes.push({ ok: Number((r.rows[0] as { one: unknown }).one) === 1 });
        } catch (err) {
          probes.push({ ok: false, err: String(err) });
        }
      };

      let burstDone = false;
      const burst = Promise.all(refunds.flatMap((r) => [deliver(t, r.id), deliver(t, r.id)])).finally(() => {
        burstDone = true;
      });
      await eventually(
        "the burst is answered while other queries are probed",
        async () => {
          await observe();
          return burstDone;
        },
        20_000,
        POLL_MS,
      );
      const answers = await burst;
      // Then every transaction the burst opened is gone (still watching their age).
      await eventually(
        "no transaction of the burst is left",
        async () => {
          const open = await openTransactions();
          ages.push(...open);
          return open.length === 0 || Math.max(...open) > maxAgeSeconds;
        },
        20_000,
        POLL_MS,
      );

      expect(probes.length).toBeGreaterThan(0);
      expect(probes.filter((p) => !p.ok)).toEqual([]);
      expect(ages.filter((a) => a > maxAgeSeconds)).toEqual([]);
      expect(await openTransactions()).toEqual([]);

      // Nothing settled during the hold; the surplus was refused before its body was read.
      const refused = answers.filter((a) => a.status === 503 && /too many webhooks/.test(a.errorMsg ?? ""));
      const admitted = answers.filter((a) => !refused.includes(a));
      expect(refused.length).toBeGreaterThanOrEqual(BURST - DEFAULT_CONNECTION_LIMIT);
      expect(admitted.length).toBeGreaterThan(0);
      for (const a of answers) {
        expect(a.status).toBe(503);
        expect(a.code).toBe("UNAVAILABLE");
        expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(1);
      }
      expect(t.deps.isolate.webhooks.refused).toBe(refused.length);
      expect(t.deps.isolate.webhooks.inFlight).toBe(0);
      const [settledEarly] = await direct.query("SELECT COUNT(*) AS n FROM tb_refund WHERE id IN (?) AND status <> ?", [
        refunds.map((r) => r.id),
        RefundStatus.requested,
      ]);
      expect(Number((settledEarly as Array<{ n: number }>)[0]?.n)).toBe(0);

      // The provider retries (the database answers again): every delivery ends in a 200.
      proxy.set({ kind: "pass" });
      const outcomes = new Map<string, string[]>(refunds.map((r) => [r.id, []]));
      let pending = refunds.flatMap((r) => [r.id, r.id]);
      await eventually("every redelivery is answered 200", async () => {
        const round = await Promise.all(pending.map(async (id) => ({ id, d: await deliver(t, id) })));
        pending = [];
        for (const { id, d } of round) {
          if (d.status === 200) outcomes.get(id)?.push(d.outcome as string);
          else {
            expect(d.status).toBe(503);
            expect(d.retryAfter).not.toBeNull();
            pending.push(id);
          }
        }
        return pending.length === 0;
      });
      // Exactly one delivery per refund settled it; the other was a duplicate.
      for (const [, seen] of outcomes) expect(seen.sort()).toEqual(["duplicate", "refunded"]);
      const [rows] = await direct.query(
        `SELECT r.status AS refund, o.status AS ord, (SELECT COUNT(*) FROM tb_refund x WHERE x.payment_id = r.payment_id) AS perPayment
           FROM tb_refund r JOIN tb_voucher_order o ON o.id = r.order_id WHERE r.id IN (?)`,
        [refunds.map((r) => r.id)],
      );
      const settled = rows as Array<{ refund: number; ord: number; perPayment: number }>;
      expect(settled.length).toBe(REFUNDS);
      for (const s of settled) {
        expect({ refund: Number(s.refund), ord: Number(s.ord), perPayment: Number(s.perPayment) }).toEqual({
          refund: RefundStatus.succeeded,
          ord: Status.refunded,
          perPayment: 1,
        });
      }

      // Admitted deliveries are still verified: a forged signature is refused.
      const forged = await deliver(t, refunds[0]?.id as string, "t=1,v1=00");
      expect(forged.status).toBe(401);
    } finally {
      await direct.end();
      await t.stop();
      await proxy.stop();
    }
  }, 90_000);
});
