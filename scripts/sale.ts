/**
 * `npm run sale -- [--stock 500] [--buyers 5000] [--concurrency 200] [--buckets 1] [--start-in 0]
 *                  [--base-url http://127.0.0.1:8787] [--shop ID] [--repeat 0.1] [--addresses N]
 *                  [--drain-timeout 120] [--json] [--allow-remote] [--stack-env .local/stack.env]`
 *
 * A flash sale against a running app (the dev stack by default; settings from .local/stack.env —
 * or the file `--stack-env` names, such as DIR/stack.env of `npm run worker -- --dir DIR` — or the
 * environment): creates a seckill voucher through the operator route, signs in the buyers, sends
 * them at `POST /api/voucher-order/seckill/{id}` with bounded concurrency, waits for the writer to
 * drain, and prints what happened — sold, refusals by reason, latency, orders in MySQL,
 * what is left in the outbox — and the console URL where the sale can be watched.
 *
 * Buyers are signed in by writing their sessions with the app's own code (`createSession`, the
 * stack's SESSION_SECRET, the stack's Redis), as the seed does for .local/tokens.txt, not through
 * the login flow: that flow sends a code by SMS (the dev provider only logs it, in the app's
 * process) and allows 20 code requests per client address per hour, so 5,000 buyers could not log
 * in from one machine. Their users are real rows (phones 170xxxxxxxx, INSERT IGNORE, so re-runs
 * reuse them), so orders point at users the console can show.
 *
 * The crowd comes from many addresses: on a loopback target each buyer's connections leave from
 * one of `--addresses` source addresses in 127.0.0.0/8 (Linux answers on all of it), so the per-IP
 * limit (SECKILL_IP_LIMIT, 200 attempts per address per 10 s by default) sees a crowd, not one
 * abusive client. Where only 127.0.0.1 exists (macOS) it falls back to one address and says so;
 * expect RATE_LIMITED then.
 *
 * Each buyer tries once; one who is told NOT_STARTED tries again when the sale opens (at most 5
 * times), and a share (`--repeat`) of the winners clicks again, as people do, and should be told
 * DUPLICATE_ORDER. It refuses any target but loopback without `--allow-remote`.
 */
import { Client } from "@planetscale/database";
import { Redis } from "@upstash/redis";
import { Presets, SingleBar } from "cli-progress";
import http from "node:http";
import { parseArgs } from "node:util";
import type { DbPort, RedisPort } from "../src/deps.ts";
import { createSession, SessionKeys } from "../src/services/session.ts";
import { loadStackEnv } from "./stack/env-file.ts";

export interface SaleOptions {
  /** The app, e.g. `http://127.0.0.1:8787`. */
  baseUrl: string;
  stock: number;
  buyers: number;
  /** Requests in flight at most. */
  concurrency: number;
  /** Redis stock buckets of the voucher (1..64, ≤ stock). */
  buckets: number;
  /** Seconds until the sale opens (the crowd arrives a second before). */
  startInS: number;
  /** Without it, a base URL that is not loopback is refused. */
  allowRemote?: boolean;
  /** The app's ADMIN_TOKEN (creates the voucher, reads the pipeline). */
  adminToken: string;
  /** The app's SESSION_SECRET: buyers' tokens are signed with it. */
  sessionSecret: string;
  /** The app's Redis (the buyers' session records). */
  redis: RedisPort;
  /** The app's MySQL: buyers' user rows and the orders count. Without it buyers are bare ids and MySQL is not read. */
  db?: DbPort;
  /** Shop of the voucher; default the first shop the app lists. */
  shopId?: number;
  /** Share of winners who click again (0..1). Default 0.1. */
  repeatShare?: number;
  /** Loopback source addresses to spread the buyers over; default one per 40 buyers. */
  addresses?: number;
  /** How long to wait for MySQL to have every order and the outbox to be empty. Default 120 s. */
  drainTimeoutMs?: number;
  /** No progress bar, no log lines. */
  quiet?: boolean;
  log?: (message: string) => void;
}

export const REFUSAL_REASONS = ["SOLD_OUT", "DUPLICATE_ORDER", "RATE_LIMITED", "NOT_STARTED", "other"] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

export interface SaleSummary {
  voucherId: number;
  shopId: number;
  buyers: number;
  attempts: number;
  sold: number;
  refusals: Record<RefusalReason, number>;
  /** What "other" was: error codes, `HTTP_<status>`, `NETWORK`. */
  otherReasons: Record<string, number>;
  /** Attempts sent again after a non-envelope 503 from `wrangler dev`'s own proxy (see `attempt`). */
  devProxyRetries: number;
  latencyMs: { p50: number; p99: number; max: number };
  /** Seconds from the first attempt to the last answer. */
  saleSeconds: number;
  /** Rows in tb_voucher_order for the voucher once drained (null without a database). */
  ordersInMysql: number | null;
  /** Reservations still in the shop's outbox (GET /admin/orders/pipeline) at the end. */
  outboxPending: number;
  drained: boolean;
  /** Seconds from the last answer until drained (or the timeout). */
  drainSeconds: number;
  sourceAddresses: number;
  consoleUrl: string;
}

/** Tries of one attempt while `wrangler dev`'s proxy answers its own 503. */
const DEV_PROXY_TRIES = 5;

export class SaleError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SaleError";
  }
}

/** Throws SaleError unless `baseUrl` is http(s) on a loopback host, or `allowRemote`. */
export function assertLoopback(baseUrl: string, allowRemote = false): URL {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new SaleError(`not a URL: ${baseUrl}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new SaleError(`not an http(s) URL: ${baseUrl}`);
  if (!allowRemote && !isLoopback(url.hostname)) {
    throw new SaleError(
      `${url.host} is not loopback: a sale simulator creates vouchers and thousands of orders; pass --allow-remote to run it there anyway`,
    );
  }
  return url;
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "[::1]" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

interface Answer {
  status: number;
  body: { success?: boolean; code?: string; data?: unknown } | null;
}

type Send = (
  method: string,
  path: string,
  headers: Record<string, string>,
  body: string | undefined,
  sourceAddress?: string,
) => Promise<Answer>;

/** Requests with a chosen source address (node:http `localAddress`; fetch cannot pick one). */
function nodeHttpSend(base: URL, agents: Map<string, http.Agent>): Send {
  return (method, path, headers, body, sourceAddress) =>
    new Promise<Answer>((resolve, reject) => {
      let agent = sourceAddress ? agents.get(sourceAddress) : undefined;
      if (sourceAddress && !agent) {
        agent = new http.Agent({ keepAlive: true });
        agents.set(sourceAddress, agent);
      }
      const req = http.request(
        {
          host: base.hostname.replace(/^\[|\]$/g, ""),
          port: base.port || 80,
          path,
          method,
          headers,
          localAddress: sourceAddress,
          agent,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () =>
            resolve({ status: res.statusCode ?? 0, body: parseJson(Buffer.concat(chunks).toString("utf8")) }),
          );
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(body);
    });
}

function fetchSend(base: URL): Send {
  return async (method, path, headers, body) => {
    const res = await fetch(new URL(path, base), { method, headers, body });
    return { status: res.status, body: parseJson(await res.text()) };
  };
}

function parseJson(text: string): Answer["body"] {
  try {
    return JSON.parse(text) as Answer["body"];
  } catch {
    return null;
  }
}

/** Nearest-rank percentile of an ascending array. */
function percentile(sorted: number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? 0;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, Math.max(0, ms)));
const round1 = (n: number) => Math.round(n * 10) / 10;

/** Source address `i` (0-based) in 127.0.0.0/8, skipping 127.0.0.0 and .1 (the app's own). */
function loopbackAddress(i: number): string {
  const a = i + 2;
  return `127.${(a >> 16) & 255}.${(a >> 8) & 255}.${a & 255}`;
}

/**
 * Users for the buyers: phones 170xxxxxxxx (INSERT IGNORE; re-runs find the same rows). Tests that
 * need users of their own (tests/runtimes/) pass another `firstPhone`.
 */
export async function buyerUsers(
  db: DbPort | undefined,
  n: number,
  firstPhone = 17_000_000_000,
): Promise<{ id: number; nickName: string; icon: string }[]> {
  if (!db) {
    // Bare ids in a range no seeded user reaches: orders reference users by id only.
    const base = 900_000_000 + Math.floor(Math.random() * 1000) * 100_000;
    return Array.from({ length: n }, (_, i) => ({ id: base + i, nickName: `buyer_${i}`, icon: "" }));
  }
  const out: { id: number; nickName: string; icon: string }[] = [];
  for (let start = 0; start < n; start += 1000) {
    const phones = Array.from({ length: Math.min(1000, n - start) }, (_, i) => String(firstPhone + start + i));
    await db.execute(
      `INSERT IGNORE INTO tb_user (phone, nick_name, icon) VALUES ${phones.map(() => "(?, ?, '')").join(", ")}`,
      phones.flatMap((p, i) => [p, `buyer_${start + i}`]),
    );
    const rows = (
      await db.execute(
        `SELECT id, nick_name, icon FROM tb_user WHERE phone IN (${phones.map(() => "?").join(", ")}) ORDER BY phone`,
        phones,
      )
    ).rows as { id: string | number; nick_name: string; icon: string }[];
    for (const r of rows) out.push({ id: Number(r.id), nickName: r.nick_name, icon: r.icon ?? "" });
  }
  return out;
}

/** Runs one sale and returns its summary (see the file comment). */
export async function runSale(opts: SaleOptions): Promise<SaleSummary> {
  const base = assertLoopback(opts.baseUrl, opts.allowRemote);
  for (const [name, v, min] of [
    ["stock", opts.stock, 1],
    ["buyers", opts.buyers, 1],
    ["concurrency", opts.concurrency, 1],
    ["buckets", opts.buckets, 1],
  ] as const) {
    if (!Number.isInteger(v) || v < min) throw new SaleError(`--${name} must be an integer ≥ ${min}`);
  }
  if (opts.buckets > 64 || opts.buckets > opts.stock)
    throw new SaleError("--buckets must be at most 64 and at most --stock");
  if (!(opts.startInS >= 0)) throw new SaleError("--start-in must be ≥ 0 seconds");
  const repeatShare = opts.repeatShare ?? 0.1;
  const log = opts.quiet ? () => {} : (opts.log ?? ((m: string) => console.error(`[sale] ${m}`)));
  const admin = { authorization: `Bearer ${opts.adminToken}` };
  const json = { "content-type": "application/json" };

  // Source addresses: many on loopback when the OS has them, else the one fetch uses.
  const agents = new Map<string, http.Agent>();
  const nodeSend = nodeHttpSend(base, agents);
  let send: Send = fetchSend(base);
  let addresses: string[] = [];
  const wanted = opts.addresses ?? Math.ceil(opts.buyers / 40);
  if (
    base.protocol === "http:" &&
    isLoopback(base.hostname) &&
    !base.hostname.includes(":") &&
    base.hostname !== "localhost" &&
    wanted > 1
  ) {
    try {
      await nodeSend("GET", "/health", {}, undefined, loopbackAddress(0));
      addresses = Array.from({ length: wanted }, (_, i) => loopbackAddress(i));
      send = nodeSend;
    } catch (err) {
      log(
        `cannot send from ${loopbackAddress(0)} (${err instanceof Error ? err.message : String(err)}): all buyers share one address, so expect RATE_LIMITED past SECKILL_IP_LIMIT`,
      );
    }
  }

  try {
    // The shop, then the voucher.
    let shopId = opts.shopId;
    if (shopId === undefined) {
      const shops = await send("GET", "/api/shop/of/name?current=1", {}, undefined);
      const first = (shops.body?.data as { id: number }[] | undefined)?.[0];
      if (!first) throw new SaleError(`${base.origin} lists no shops: seed some first (npm run seed)`);
      shopId = first.id;
    }
    const openAt = Math.floor((Date.now() + opts.startInS * 1000) / 1000) * 1000;
    const created = await send(
      "POST",
      "/api/voucher/seckill",
      { ...admin, ...json },
      JSON.stringify({
        shopId,
        title: `限时秒杀 ${opts.stock}份`,
        subTitle: "sale simulator",
        rules: "每人限购一张",
        payValue: 990,
        actualValue: 10000,
        stock: opts.stock,
        buckets: opts.buckets,
        beginTime: openAt,
        endTime: openAt + 3600_000,
      }),
    );
    if (created.status !== 200 || !created.body?.success || typeof created.body.data !== "number") {
      throw new SaleError(
        `creating the voucher failed (${created.status}): ${JSON.stringify(created.body)}${created.status === 401 ? " — is ADMIN_TOKEN the app's?" : ""}`,
      );
    }
    const voucherId = created.body.data;
    const consoleUrl = `${base.origin}/console?voucher=${voucherId}`;
    log(
      `voucher ${voucherId} on shop ${shopId}: ${opts.stock} units, ${opts.buckets} bucket(s), opens ${new Date(openAt).toISOString()}; watch: ${consoleUrl}`,
    );

    // Buyers: user rows, then sessions written with the app's own code.
    const users = await buyerUsers(opts.db, opts.buyers);
    const keys = new SessionKeys(opts.sessionSecret);
    const tokens: string[] = [];
    for (let i = 0; i < users.length; i += 500) {
      tokens.push(...(await Promise.all(users.slice(i, i + 500).map((u) => createSession(opts.redis, u, 3600, keys)))));
    }
    const me = await send("GET", "/api/user/me", { authorization: tokens[0] ?? "" }, undefined, addresses[0]);
    if (!me.body?.success)
      throw new SaleError(`the app refused a buyer's session (${me.status}): is SESSION_SECRET (and Redis) the app's?`);
    log(
      `${tokens.length} buyers signed in${addresses.length > 1 ? `, from ${addresses.length} loopback addresses` : ""}`,
    );

    // The crowd arrives a second before the sale opens.
    const arriveAt = openAt - 1000;
    while (Date.now() < arriveAt) {
      log(`sale opens in ${Math.ceil((openAt - Date.now()) / 1000)} s`);
      await sleep(Math.min(5000, arriveAt - Date.now()));
    }

    const counts = new Map<string, number>();
    let devProxyRetries = 0;
    const latencies: number[] = [];
    let sold = 0;
    const bar = opts.quiet
      ? null
      : new SingleBar(
          {
            format: "sale       [{bar}] {percentage}% | {value}/{total} buyers | sold {sold} | {duration}s",
            stream: process.stderr,
            hideCursor: false,
          },
          Presets.shades_classic,
        );
    bar?.start(tokens.length, 0, { sold: 0 });

    const attempt = async (i: number): Promise<string> => {
      const t0 = performance.now();
      let outcome: string;
      try {
        let res: Answer;
        for (let tries = 1; ; tries++) {
          res = await send(
            "POST",
            `/api/voucher-order/seckill/${voucherId}`,
            { authorization: tokens[i] ?? "" },
            undefined,
            addresses.length > 0 ? addresses[i % addresses.length] : undefined,
          );
          // A 503 that is not the app's envelope is `wrangler dev`'s own proxy ("your worker restarted
          // mid-request", seen on a CPU-starved machine): it does not know whether the Worker got the
          // attempt, so the buyer sends it again and the Worker says (the order, or DUPLICATE_ORDER).
          if (res.status !== 503 || res.body !== null || tries >= DEV_PROXY_TRIES) break;
          devProxyRetries++;
        }
        outcome = res.body?.success === true ? "SOLD" : (res.body?.code ?? `HTTP_${res.status}`);
      } catch {
        outcome = "NETWORK";
      }
      latencies.push(performance.now() - t0);
      counts.set(outcome, (counts.get(outcome) ?? 0) + 1);
      return outcome;
    };

    const started = performance.now();
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < tokens.length; i = next++) {
        let outcome = await attempt(i);
        for (let tries = 1; outcome === "NOT_STARTED" && tries < 5; tries++) {
          await sleep(openAt - Date.now() + Math.random() * 250);
          outcome = await attempt(i);
        }
        if (outcome === "SOLD") {
          sold++;
          if (Math.random() < repeatShare) await attempt(i);
        }
        bar?.increment(1, { sold });
      }
    };
    await Promise.all(Array.from({ length: Math.min(opts.concurrency, tokens.length) }, worker));
    bar?.stop();
    const saleSeconds = round1((performance.now() - started) / 1000);

    // Drain: every sold unit a row in MySQL, nothing left in the shop's outbox.
    const drainStarted = performance.now();
    const deadline = Date.now() + (opts.drainTimeoutMs ?? 120_000);
    let ordersInMysql: number | null = null;
    let outboxPending = -1;
    let drained = false;
    for (;;) {
      if (opts.db) {
        const row = (
          await opts.db.execute("SELECT COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = ?", [voucherId])
        ).rows[0] as { n: string | number } | undefined;
        ordersInMysql = Number(row?.n ?? 0);
      }
      const pipeline = await send("GET", "/admin/orders/pipeline", admin, undefined);
      if (!pipeline.body?.success) throw new SaleError(`GET /admin/orders/pipeline failed (${pipeline.status})`);
      const shops = (pipeline.body.data as { shops: { shopId: number; pending: number }[] }).shops;
      outboxPending = shops.find((s) => s.shopId === shopId)?.pending ?? 0;
      drained = outboxPending === 0 && (ordersInMysql === null || ordersInMysql >= sold);
      if (drained || Date.now() > deadline) break;
      await sleep(250);
    }

    const refusals = Object.fromEntries(REFUSAL_REASONS.map((r) => [r, 0])) as Record<RefusalReason, number>;
    const otherReasons: Record<string, number> = {};
    for (const [outcome, n] of counts) {
      if (outcome === "SOLD") continue;
      if ((REFUSAL_REASONS as readonly string[]).includes(outcome) && outcome !== "other")
        refusals[outcome as RefusalReason] += n;
      else {
        refusals.other += n;
        otherReasons[outcome] = (otherReasons[outcome] ?? 0) + n;
      }
    }
    latencies.sort((a, b) => a - b);
    return {
      voucherId,
      shopId,
      buyers: tokens.length,
      attempts: latencies.length,
      sold: counts.get("SOLD") ?? 0,
      refusals,
      otherReasons,
      devProxyRetries,
      latencyMs: {
        p50: round1(percentile(latencies, 0.5)),
        p99: round1(percentile(latencies, 0.99)),
        max: round1(latencies.at(-1) ?? 0),
      },
      saleSeconds,
      ordersInMysql,
      outboxPending,
      drained,
      drainSeconds: round1((performance.now() - drainStarted) / 1000),
      sourceAddresses: Math.max(1, addresses.length),
      consoleUrl,
    };
  } finally {
    for (const a of agents.values()) a.destroy();
  }
}

/** The summary as a person reads it. */
export function formatSummary(s: SaleSummary): string {
  const r = s.refusals;
  const other = Object.entries(s.otherReasons)
    .map(([k, n]) => `${k} ${n}`)
    .join(", ");
  return [
    `voucher ${s.voucherId} (shop ${s.shopId}): ${s.buyers} buyers, ${s.attempts} attempts in ${s.saleSeconds} s from ${s.sourceAddresses} address(es)`,
    `  sold               ${s.sold}`,
    `  SOLD_OUT           ${r.SOLD_OUT}`,
    `  DUPLICATE_ORDER    ${r.DUPLICATE_ORDER}`,
    `  RATE_LIMITED       ${r.RATE_LIMITED}`,
    `  NOT_STARTED        ${r.NOT_STARTED}`,
    `  other              ${r.other}${other ? `  (${other})` : ""}`,
    ...(s.devProxyRetries > 0
      ? [
          `  resent             ${s.devProxyRetries} (wrangler dev's proxy answered its own 503: not the Worker's answer)`,
        ]
      : []),
    `  latency            p50 ${s.latencyMs.p50} ms · p99 ${s.latencyMs.p99} ms · max ${s.latencyMs.max} ms`,
    `  orders in MySQL    ${s.ordersInMysql ?? "not read (no DATABASE_URL)"}${s.drained ? ` (drained ${s.drainSeconds} s after the last answer)` : ` (NOT drained after ${s.drainSeconds} s)`}`,
    `  left in outbox     ${s.outboxPending}`,
    `  console            ${s.consoleUrl}`,
  ].join("\n");
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      "base-url": { type: "string" },
      stock: { type: "string", default: "500" },
      buyers: { type: "string", default: "5000" },
      concurrency: { type: "string", default: "200" },
      buckets: { type: "string", default: "1" },
      "start-in": { type: "string", default: "0" },
      shop: { type: "string" },
      repeat: { type: "string", default: "0.1" },
      addresses: { type: "string" },
      "drain-timeout": { type: "string", default: "120" },
      "allow-remote": { type: "boolean", default: false },
      json: { type: "boolean", default: false },
      "stack-env": { type: "string" },
    },
  });
  const env = { ...loadStackEnv(values["stack-env"]), ...process.env };
  const missing = ["ADMIN_TOKEN", "SESSION_SECRET", "UPSTASH_REDIS_REST_URL", "UPSTASH_REDIS_REST_TOKEN"].filter(
    (k) => !env[k],
  );
  if (missing.length > 0) {
    console.error(
      `no stack settings (${missing.join(", ")}): start the dev stack (\`npm run dev\`) or set them in the environment`,
    );
    process.exit(1);
  }
  try {
    const summary = await runSale({
      baseUrl: values["base-url"] ?? `http://127.0.0.1:${env.PORT ?? "8787"}`,
      stock: Number(values.stock),
      buyers: Number(values.buyers),
      concurrency: Number(values.concurrency),
      buckets: Number(values.buckets),
      startInS: Number(values["start-in"]),
      shopId: values.shop === undefined ? undefined : Number(values.shop),
      repeatShare: Number(values.repeat),
      addresses: values.addresses === undefined ? undefined : Number(values.addresses),
      drainTimeoutMs: Number(values["drain-timeout"]) * 1000,
      allowRemote: values["allow-remote"],
      adminToken: env.ADMIN_TOKEN as string,
      sessionSecret: env.SESSION_SECRET as string,
      redis: new Redis({
        url: env.UPSTASH_REDIS_REST_URL as string,
        token: env.UPSTASH_REDIS_REST_TOKEN as string,
        enableTelemetry: false,
      }),
      db: env.DATABASE_URL ? new Client({ url: env.DATABASE_URL }) : undefined,
    });
    console.log(values.json ? JSON.stringify(summary) : formatSummary(summary));
    process.exit(summary.drained ? 0 : 1);
  } catch (err) {
    if (!(err instanceof SaleError)) throw err;
    console.error(`[sale] ${err.message}`);
    process.exit(2);
  }
}
