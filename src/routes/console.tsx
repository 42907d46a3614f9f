/** @jsxImportSource hono/jsx */
/**
 * The operators' console (/console): hono/jsx pages behind a signed session cookie
 * (console/session.ts), live sale views over server-sent events, voucher forms and operations.
 * Every state-changing form is a POST checked for its Origin and its per-session CSRF token.
 */
import { Hono } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { createMiddleware } from "hono/factory";
import { streamSSE } from "hono/streaming";
import { z } from "zod";
import { ASSET_PREFIX, OWN_FILES, type OwnFile, VENDOR_FILES, type VendorFile, vendorFile } from "../console/assets.ts";
import { type FormValues, submitSeckill, submitVoucher } from "../console/forms.ts";
import { type SaleSnapshot, saleConfig, saleLimits, saleSnapshot, saleState } from "../console/sale.ts";
import { type ConsoleSession, issueSession, SESSION_COOKIE, SESSION_TTL_MS, verifySession } from "../console/session.ts";
import { LoginPage, MessagePage, OpsPage, OrdersPage, SalePage, SalesPage, type VoucherRow, VouchersPage } from "../console/views.tsx";
import { AppError, fail } from "../errors.ts";
import { checkOperatorAttempt } from "../http/auth.ts";
import { boundedForm, formBody } from "../http/body.ts";
import { limitAddress } from "../http/client-ip.ts";
import { doc, type RouteDoc } from "../openapi/describe.ts";
import { runJobNow } from "../jobs/index.ts";
import { keys } from "../redis/keys.ts";
import { findReservation, getOrderRow, listOrdersOfUser } from "../services/seckill/orders.ts";
import { listRefunds } from "../services/seckill/payments.ts";
import type { ReconcileReport } from "../services/seckill/reconcile.ts";
import { registeredSeckills } from "../services/seckill/registry.ts";
import { resilienceSnapshot } from "../resilience.ts";
import { statusName } from "../services/seckill/types.ts";
import { isoDay, uvReport } from "../services/uv.ts";
import type { AppEnv } from "../types.ts";
import { timingSafeEqual } from "../util/compare.ts";
import { isOrderId } from "../util/ids.ts";
import { formatInZone, parseSqlUtc } from "../util/time.ts";

type ConsoleEnv = AppEnv & { Variables: { session: ConsoleSession; form: FormValues } };

/** Each event stream ends after this long, ms (Workers fire no abort on disconnect); EventSource reconnects. */
export const STREAM_MAX_MS = 5 * 60_000;
/** One `stats` event per tick, ms; it doubles as the heartbeat that keeps Bun's idle timeout away. */
export const TICK_MS = 1_000;

const LOGIN = "/console/login";
const html = { 200: { description: "An HTML page", content: { "text/html": { schema: { type: "string" } } } } };
const page = (summary: string, extra: Partial<RouteDoc> = {}): RouteDoc => ({
  tag: "site",
  summary: `Console: ${summary}`,
  description: "Operators' console page; needs the console session cookie set by POST /console/login (redirects there otherwise).",
  access: "public",
  responses: html,
  ...extra,
});
const post = (summary: string, extra: Partial<RouteDoc> = {}): RouteDoc =>
  page(summary, { description: "Form post of the console: needs the session cookie, a same-origin Origin and the session's CSRF token (`_csrf`); 303 on success.", ...extra });

const VoucherParam = z.object({ voucherId: z.string().regex(/^[1-9]\d{0,15}$/) });
const AssetParam = z.object({ file: z.enum([...Object.keys(VENDOR_FILES), ...Object.keys(OWN_FILES)] as [string, ...string[]]) });

function cookieOptions(publicUrl: string, maxAgeSeconds: number) {
  return { path: "/console", httpOnly: true, sameSite: "Strict" as const, secure: publicUrl.startsWith("https:"), maxAge: maxAgeSeconds };
}

/**
 * The console's Content-Security-Policy: its pages load only their own files (site.tsx: same-origin
 * scripts and stylesheets, no inline script); charts set styles from script, hence 'unsafe-inline'
 * for styles only. Nothing may frame the console.
 */
export const CONSOLE_CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
/** Live streams one console session may hold open in an isolate. */
export const CONSOLE_STREAMS_PER_SESSION = 4;

/**
 * Is a verified console session still alive server-side: not signed out (its nonce revoked) and
 * not issued before the last "revoke all"? One MGET. With Redis unreachable, pages (reads) are
 * answered — the console is most needed during an outage — and state-changing posts are refused.
 */
async function sessionAlive(deps: AppEnv["Variables"]["deps"], s: ConsoleSession, method: string): Promise<boolean> {
  try {
    const [revoked, epoch] = await deps.redis.mget<(string | number | null)[]>(keys.consoleRevoked(s.nonce), keys.consoleEpoch());
    return revoked === null && (epoch === null || s.issuedMs >= Number(epoch));
  } catch {
    return method === "GET";
  }
}

/** Signed in, or: pages redirect to the login form, streams and posts answer 401. */
const requireConsole = createMiddleware<ConsoleEnv>(async (c, next) => {
  const deps = c.get("deps");
  const verified = await verifySession(deps.config.ADMIN_TOKEN, getCookie(c, SESSION_COOKIE), deps.clock.now());
  const session = verified && (await sessionAlive(deps, verified, c.req.method)) ? verified : null;
  if (!session) {
    if (c.req.method === "GET" && !c.req.path.endsWith("/events")) return c.redirect(LOGIN, 302);
    return c.html(<MessagePage title="Signed out" message="Sign in again: the console session is missing or has expired." />, 401);
  }
  c.set("session", session);
  await next();
});

/** The request comes from one of our own pages: its Origin (or, without one, Sec-Fetch-Site) says so. */
function sameOrigin(req: Request, publicUrl: string): boolean {
  const origin = req.headers.get("origin");
  if (origin === null || origin === "null") return req.headers.get("sec-fetch-site") === "same-origin";
  return origin === new URL(req.url).origin || origin === new URL(publicUrl).origin;
}


/** Same origin and the session's CSRF token in `_csrf`; the parsed form is in `c.var.form`. */
const requireCsrf = createMiddleware<ConsoleEnv>(async (c, next) => {
  const deps = c.get("deps");
  const refuse = (message: string) => c.html(<MessagePage title="Refused" message={message} csrf={c.get("session").csrf} />, 403);
  if (!sameOrigin(c.req.raw, deps.config.PUBLIC_URL)) return refuse("This form was not sent from the console's own pages.");
  const form = await boundedForm(c.req.raw);
  if (!form || !timingSafeEqual(form._csrf ?? "", c.get("session").csrf)) return refuse("The form's CSRF token is missing or wrong: reload the page and try again.");
  c.set("form", form);
  await next();
});

const present = (ms: number, zone: string) => formatInZone(ms, zone);

async function voucherRows(deps: AppEnv["Variables"]["deps"]): Promise<VoucherRow[]> {
  const zone = deps.config.SERVICE_TIME_ZONE;
  const rows = (
    await deps.db.execute(
      `SELECT v.id, v.shop_id, v.title, v.type, v.status, v.pay_value, v.actual_value, s.stock, s.begin_time, s.end_time
         FROM tb_voucher v LEFT JOIN tb_seckill_voucher s ON s.voucher_id = v.id
        ORDER BY v.id DESC LIMIT 50`,
    )
  ).rows as Record<string, string | number | null>[];
  const now = deps.clock.now();
  return rows.map((r) => {
    const seckill = Number(r.type) === 1 && r.begin_time !== null;
    const beginMs = seckill ? parseSqlUtc(String(r.begin_time)) : 0;
    const endMs = seckill ? parseSqlUtc(String(r.end_time)) : 0;
    return {
      id: Number(r.id),
      shopId: Number(r.shop_id),
      title: String(r.title),
      type: Number(r.type),
      payValue: Number(r.pay_value),
      actualValue: Number(r.actual_value),
      stock: seckill ? Number(r.stock) : null,
      begin: seckill ? present(beginMs, zone) : null,
      end: seckill ? present(endMs, zone) : null,
      state: seckill ? saleState({ beginMs, endMs }, Number(r.stock), now) : ({ 1: "on sale", 2: "off sale", 3: "expired" } as Record<number, string>)[Number(r.status)] ?? "?",
    };
  });
}

const sseEvent = (s: SaleSnapshot) => ({ event: "stats", data: JSON.stringify(s) });

/** Mounted at /console. */
export const consolePages = new Hono<ConsoleEnv>()
  .use(async (c, next) => {
    await next();
    c.res.headers.set("content-security-policy", CONSOLE_CSP);
  })
  .get(
    "/login",
    doc(page("sign-in form"), (c) => c.html(<LoginPage />)),
  )
  .post(
    "/login",
    formBody(),
    doc(page("sign in with the operator token (sets the HttpOnly, SameSite=Strict session cookie)", { responses: { ...html, 401: { description: "Wrong token" }, 403: { description: "Not same-origin" } } }), async (c) => {
      const deps = c.get("deps");
      if (!sameOrigin(c.req.raw, deps.config.PUBLIC_URL)) return c.html(<LoginPage error="This form was not sent from the console's own pages." />, 403);
      // An address over its failed sign-ins is refused before its body is even read.
      const refused = deps.isolate.operatorAttempts.refusedFor(limitAddress(c, deps.config), deps.clock.now());
      if (refused > 0) {
        c.header("Retry-After", String(Math.max(1, Math.ceil(refused / 1000))));
        return c.html(<LoginPage error="Too many failed sign-ins from this address: try again later." />, 429);
      }
      const form = await boundedForm(c.req.raw);
      const token = form?.token ?? "";
      try {
        // Failed sign-ins count per address like the Bearer routes' (http/operator-attempts.ts).
        await checkOperatorAttempt(deps, limitAddress(c, deps.config), timingSafeEqual(token, deps.config.ADMIN_TOKEN));
      } catch (err) {
        if (err instanceof AppError && err.code === "RATE_LIMITED") {
          c.header("Retry-After", String(Math.max(1, Math.ceil((err.retryAfterSeconds ?? 1)))));
          return c.html(<LoginPage error="Too many failed sign-ins from this address: try again later." />, 429);
        }
        if (err instanceof AppError && err.code === "UNAUTHORIZED") return c.html(<LoginPage error="Not the operator token." />, 401);
        throw err;
      }
      const { cookie } = await issueSession(deps.config.ADMIN_TOKEN, deps.clock.now());
      setCookie(c, SESSION_COOKIE, cookie, cookieOptions(deps.config.PUBLIC_URL, SESSION_TTL_MS / 1000));
      return c.redirect("/console", 303);
    }),
  )
  .post(
    "/logout",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(post("sign out (ends the session server-side and clears its cookie)"), async (c) => {
      const deps = c.get("deps");
      const s = c.get("session");
      // Server-side: the cookie stops working everywhere, also if someone kept a copy.
      await deps.redis.set(keys.consoleRevoked(s.nonce), "1", { px: Math.max(1000, s.expiresMs - deps.clock.now()) });
      deleteCookie(c, SESSION_COOKIE, cookieOptions(deps.config.PUBLIC_URL, 0));
      return c.redirect(LOGIN, 303);
    }),
  )
  .get(
    "/",
    requireConsole,
    doc(page("seckill sales and their state"), async (c) => {
      const deps = c.get("deps");
      const zone = deps.config.SERVICE_TIME_ZONE;
      const now = deps.clock.now();
      const cfgs = (await registeredSeckills(deps, now)).slice(-100).reverse();
      const p = deps.redis.pipeline();
      for (const cfg of cfgs) for (let i = 0; i < cfg.buckets; i++) p.get(keys.seckill.stock(cfg.shopId, cfg.voucherId, i));
      const raw = cfgs.length > 0 ? ((await p.exec()) as unknown[]) : [];
      let at = 0;
      const rows = cfgs.map((cfg) => {
        let left = 0;
        for (let i = 0; i < cfg.buckets; i++) left += Number(raw[at++] ?? 0);
        return { voucherId: cfg.voucherId, shopId: cfg.shopId, initial: cfg.initialStock, stockLeft: left, begin: present(cfg.beginMs, zone), end: present(cfg.endMs, zone), state: saleState(cfg, left, now) };
      });
      return c.html(<SalesPage csrf={c.get("session").csrf} rows={rows} />);
    }),
  )
  .get(
    "/vouchers",
    requireConsole,
    doc(page("voucher forms and the latest vouchers"), async (c) => {
      const created = Number(c.req.query("created") ?? "") || undefined;
      return c.html(<VouchersPage csrf={c.get("session").csrf} rows={await voucherRows(c.get("deps"))} created={created} />);
    }),
  )
  .post(
    "/vouchers",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(post("create a normal voucher (POST /api/voucher's fields and rules; 400 with the errors next to the fields)", { responses: { ...html, 400: { description: "Invalid fields" } } }), async (c) => {
      const deps = c.get("deps");
      const values = c.get("form");
      const res = await submitVoucher(deps, values);
      if (res.ok) return c.redirect(`/console/vouchers?created=${res.voucherId}`, 303);
      return c.html(<VouchersPage csrf={c.get("session").csrf} rows={await voucherRows(deps)} form={{ kind: "normal", values, errors: res.errors }} />, 400);
    }),
  )
  .post(
    "/vouchers/seckill",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(post("create a seckill voucher (POST /api/voucher/seckill's fields and rules; 400 with the errors next to the fields)", { responses: { ...html, 400: { description: "Invalid fields" } } }), async (c) => {
      const deps = c.get("deps");
      const values = c.get("form");
      const res = await submitSeckill(deps, values);
      if (res.ok) return c.redirect(`/console/sale/${res.voucherId}`, 303);
      return c.html(<VouchersPage csrf={c.get("session").csrf} rows={await voucherRows(deps)} form={{ kind: "seckill", values, errors: res.errors }} />, 400);
    }),
  )
  .get(
    "/sale/:voucherId",
    requireConsole,
    doc(page("live view of one seckill sale", { params: VoucherParam }), async (c) => {
      const deps = c.get("deps");
      const csrf = c.get("session").csrf;
      const id = c.req.param("voucherId") ?? "";
      const cfg = /^[1-9]\d{0,15}$/.test(id) ? await saleConfig(deps, Number(id)) : null;
      if (!cfg) return c.html(<MessagePage title="No such sale" message={`Voucher ${id} is not a seckill voucher.`} csrf={csrf} />, 404);
      const zone = deps.config.SERVICE_TIME_ZONE;
      return c.html(
        <SalePage
          csrf={csrf}
          s={await saleSnapshot(deps, cfg)}
          begin={present(cfg.beginMs, zone)}
          end={present(cfg.endMs, zone)}
          limits={saleLimits(cfg)}
          campaign={cfg.campaign ?? null}
          styles={[`${ASSET_PREFIX}uPlot.min.css`]}
          scripts={[`${ASSET_PREFIX}uPlot.iife.min.js`, `${ASSET_PREFIX}sale.js`]}
        />,
      );
    }),
  )
  .get(
    "/sale/:voucherId/events",
    requireConsole,
    doc(
      page("the sale's numbers as server-sent events (`stats`, one per second; each stream ends after 5 minutes and the browser reconnects)", {
        params: VoucherParam,
        responses: { 200: { description: "text/event-stream", content: { "text/event-stream": { schema: { type: "string" } } } }, 404: { description: "Not a seckill voucher" } },
      }),
      async (c) => {
        const deps = c.get("deps");
        const id = c.req.param("voucherId") ?? "";
        const cfg = /^[1-9]\d{0,15}$/.test(id) ? await saleConfig(deps, Number(id)) : null;
        if (!cfg) return c.json(fail("NOT_FOUND", `voucher ${id} is not a seckill voucher`, c.get("requestId")), 404);
        const nonce = c.get("session").nonce;
        const open = deps.isolate.consoleStreams;
        if ((open.get(nonce) ?? 0) >= CONSOLE_STREAMS_PER_SESSION) {
          c.header("Retry-After", "5");
          return c.json(fail("RATE_LIMITED", `at most ${CONSOLE_STREAMS_PER_SESSION} live streams per console session`, c.get("requestId")), 429);
        }
        open.set(nonce, (open.get(nonce) ?? 0) + 1);
        const closed = () => {
          const n = (open.get(nonce) ?? 1) - 1;
          if (n <= 0) open.delete(nonce);
          else open.set(nonce, n);
        };
        return streamSSE(c, async (stream) => {
          stream.onAbort(closed);
          const until = Date.now() + STREAM_MAX_MS;
          await stream.write("retry: 2000\n\n");
          while (!stream.aborted && !stream.closed && Date.now() < until) {
            try {
              await stream.writeSSE(sseEvent(await saleSnapshot(deps, cfg)));
            } catch (err) {
              c.get("log").warn("console sale snapshot failed", { err });
              await stream.writeSSE({ event: "failure", data: "snapshot failed" });
            }
            await stream.sleep(TICK_MS);
          }
          if (!stream.aborted) closed();
        });
      },
    ),
  )
  .get(
    "/ops",
    requireConsole,
    doc(page("operations: dependency breakers, limiters, hot keys, reconcile report, writer, cache hit rates, UV per day, refunds"), async (c) => {
      const deps = c.get("deps");
      const zone = deps.config.SERVICE_TIME_ZONE;
      const now = deps.clock.now();
      const to = isoDay(now, zone);
      const from = isoDay(now - 6 * 86_400_000, zone);
      // Each Redis/MySQL-backed section falls back on its own (named in `unavailable`), so the page
      // still renders — breakers and limiters are memory — while a dependency is down, which is
      // when an operator opens it.
      const unavailable: string[] = [];
      const orElse =
        <T,>(section: string, fallback: T) =>
        (err: unknown): T => {
          unavailable.push(`${section}: ${err instanceof Error ? err.message : String(err)}`);
          return fallback;
        };
      const metrics = deps.isolate.caches.metrics;
      const [report, { cache, hot }, uv, refunds] = await Promise.all([
        deps.redis.get<ReconcileReport>(keys.seckill.reconcileReport()).catch(orElse("reconcile report", null)),
        // The hot report right after the counters' flush: one pipeline more than before, no second flush.
        metrics
          .report(deps)
          .then(async (cache) => ({ cache, hot: await metrics.hotReport(deps, { flushed: true }).catch(orElse("hot keys", null)) }))
          .catch(orElse("cache hit rates and hot keys", { cache: { modules: {}, isolates: 0 }, hot: null })),
        uvReport(deps, from, to).catch(orElse("unique visitors", { days: [], total: 0 })),
        listRefunds(deps, { limit: 20 }).catch(orElse("refunds", [])),
      ]);
      const promotedHere = new Set((hot?.promotedHere ?? []).map((k) => `${k.module}:${k.key}`));
      const breakers = Object.entries(resilienceSnapshot(deps.isolate.resilience)).map(([dependency, g]) => ({
        dependency,
        ...g,
        lastOpenedAt: g.lastOpenedAt === null ? null : present(g.lastOpenedAt, zone),
      }));
      const admission = deps.isolate.seckillAdmission.snapshot(now);
      const listing = deps.isolate.listingLimit?.snapshot(now) ?? null;
      const flashes: Record<string, { ok: boolean; text: string }> = {
        ran: { ok: true, text: "Reconcile ran: the report below is the new one." },
        busy: { ok: false, text: "A reconcile run is in progress elsewhere (lock held): try again in a moment." },
      };
      return c.html(
        <OpsPage
          csrf={c.get("session").csrf}
          flash={flashes[c.req.query("reconcile") ?? ""]}
          reconcileAt={report?.at ? present(report.at, zone) : null}
          reconcile={(report?.vouchers ?? []) as unknown as Record<string, unknown>[]}
          cache={Object.entries(cache.modules).map(([module, m]) => ({ module, ...m }))}
          cacheIsolates={cache.isolates}
          uv={uv.days}
          uvTotal={uv.total}
          refunds={refunds.map((r) => ({ ...r, nextAttemptAt: r.nextAttemptAt === null ? null : present(r.nextAttemptAt, zone), createTime: present(r.createTime, zone) }))}
          pipeline={{ ...deps.orderGroups.stats, lockConflicts: deps.orderGroups.lockConflicts } as Record<string, unknown>}
          unavailable={unavailable}
          breakers={breakers}
          hot={hot && { rule: hot.rule, top: hot.top.map((k) => ({ ...k, promotedHere: promotedHere.has(`${k.module}:${k.key}`) ? "yes" : "" })), promotedHere: hot.promotedHere }}
          admission={admission}
          listing={listing && { ...listing, lastSyncAt: listing.lastSyncAt === null ? null : present(listing.lastSyncAt, zone) }}
        />,
      );
    }),
  )
  .post(
    "/ops/reconcile",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(post("run a reconcile now (the same locked run as POST /admin/reconcile)"), async (c) => {
      const deps = c.get("deps");
      const res = await runJobNow(deps, "reconcile");
      return c.redirect(`/console/ops?reconcile=${res.ran ? "ran" : "busy"}`, 303);
    }),
  )
  .get(
    "/orders",
    requireConsole,
    doc(page("order lookup by order id or user id"), async (c) => {
      const deps = c.get("deps");
      const zone = deps.config.SERVICE_TIME_ZONE;
      const id = (c.req.query("id") ?? "").trim();
      const userId = (c.req.query("userId") ?? "").trim();
      const csrf = c.get("session").csrf;
      const show = (o: { id: string; userId: number; voucherId: number; status: number; createTime: number; payTime: number | null }) => ({
        ...o,
        status: statusName(o.status),
        createTime: present(o.createTime, zone),
        payTime: o.payTime === null ? null : present(o.payTime, zone),
      });
      if (id) {
        if (!isOrderId(id)) return c.html(<OrdersPage csrf={csrf} id={id} userId={userId} error="not an order id" rows={null} />, 400);
        const row = await getOrderRow(deps, id);
        if (row) return c.html(<OrdersPage csrf={csrf} id={id} userId={userId} rows={[show(row)]} />);
        const r = await findReservation(deps, id);
        const queued = r ? [{ id, userId: r.userId, voucherId: r.voucherId, status: "queued (in the outbox)", createTime: present(r.reservedAt, zone), payTime: null }] : [];
        return c.html(<OrdersPage csrf={csrf} id={id} userId={userId} rows={queued} />);
      }
      if (userId) {
        if (!/^[1-9]\d{0,15}$/.test(userId)) return c.html(<OrdersPage csrf={csrf} id={id} userId={userId} error="not a user id" rows={null} />, 400);
        const rows = await listOrdersOfUser(deps, Number(userId), 1, 20);
        return c.html(<OrdersPage csrf={csrf} id={id} userId={userId} rows={rows.map(show)} />);
      }
      return c.html(<OrdersPage csrf={csrf} id="" userId="" rows={null} />);
    }),
  )
  .get(
    `/assets/:file`,
    doc(
      page("a stylesheet or script of the console (uPlot's served as a static asset on Workers)", {
        description: "Public: library files and the console's own scripts.",
        params: AssetParam,
        responses: { 200: { description: "The file", content: { "text/css": { schema: { type: "string" } }, "text/javascript": { schema: { type: "string" } } } }, 404: { description: "Not one of the console's files" } },
      }),
      async (c) => {
        const name = c.req.param("file") ?? "";
        if (Object.hasOwn(OWN_FILES, name)) {
          const f = OWN_FILES[name as OwnFile];
          return c.body(f.body, 200, { "content-type": f.type, "cache-control": "no-cache" });
        }
        const body = Object.hasOwn(VENDOR_FILES, name) ? await vendorFile(name as VendorFile) : null;
        if (!body) return c.json(fail("NOT_FOUND", `no asset ${name}`, c.get("requestId")), 404);
        return c.body(body, 200, { "content-type": VENDOR_FILES[name as VendorFile].type, "cache-control": "public, max-age=3600" });
      },
    ),
  );
