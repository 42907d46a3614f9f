/** @jsxImportSource hono/jsx */
/**
 * The operators' console (/console): hono/jsx pages behind a signed session cookie
 * (console/session.ts), live sale views over server-sent events, voucher forms and operations.
 * Every state-changing form is a POST checked for its Origin and its per-session CSRF token.
 * Handlers read the same typed snapshots /admin answers as JSON (services/ops.ts, vouchers.ts,
 * dlq.ts) and hand them to the views (console/views.tsx).
 */
import { Hono } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { createMiddleware } from "hono/factory";
import { streamSSE } from "hono/streaming";
import { z } from "zod";
import { OWN_FILES, type OwnFile, VENDOR_FILES, type VendorFile, vendorFile } from "../console/assets.ts";
import { type FormValues, submitSeckill, submitVoucher } from "../console/forms.ts";
import { type SaleSnapshot, saleSnapshot } from "../console/sale.ts";
import {
  type ConsoleSession,
  issueSession,
  SESSION_COOKIE,
  SESSION_TTL_MS,
  verifySession,
} from "../console/session.ts";
import {
  DlqPage,
  type Flash,
  LoginPage,
  MessagePage,
  OpsPage,
  OrdersPage,
  SalePage,
  SalesPage,
  VouchersPage,
} from "../console/views.tsx";
import { AppError, fail } from "../errors.ts";
import { checkOperatorAttempt } from "../http/auth.ts";
import { boundedForm, formBody } from "../http/body.ts";
import { limitAddress } from "../http/client-ip.ts";
import { runJobNow } from "../jobs/index.ts";
import type { Logger } from "../log.ts";
import { doc, type RouteDoc } from "../openapi/describe.ts";
import { consoleSessionAlive, revokeConsoleSession } from "../services/console-sessions.ts";
import {
  type BulkOutcome,
  deleteAll,
  deleteDeadLetter,
  DlqId,
  listDeadLetters,
  redriveAll,
  redriveDeadLetter,
} from "../services/dlq.ts";
import { opsSnapshot, orderById, ordersOfUser, saleConfig, salesOverview } from "../services/ops.ts";
import { ShardUnavailable } from "../services/seckill/shards.ts";
import { latestVouchers } from "../services/vouchers.ts";
import type { AppEnv } from "../types.ts";
import { timingSafeEqual } from "../util/crypto.ts";
import { isOrderId } from "../util/ids.ts";
import { scrubbedMessage } from "../util/scrub.ts";

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
  description:
    "Operators' console page; needs the console session cookie set by POST /console/login (redirects there otherwise).",
  access: "public",
  responses: html,
  ...extra,
});
const post = (summary: string, extra: Partial<RouteDoc> = {}): RouteDoc =>
  page(summary, {
    description:
      "Form post of the console: needs the session cookie, a same-origin Origin and the session's CSRF token (`_csrf`); 303 on success.",
    ...extra,
  });

const VoucherParam = z.object({ voucherId: z.string().regex(/^[1-9]\d{0,15}$/) });
const DlqParam = z.object({ id: DlqId });
const AssetParam = z.object({
  file: z.enum([...Object.keys(VENDOR_FILES), ...Object.keys(OWN_FILES)] as [string, ...string[]]),
});

function cookieOptions(publicUrl: string, maxAgeSeconds: number) {
  return {
    path: "/console",
    httpOnly: true,
    sameSite: "Strict" as const,
    secure: publicUrl.startsWith("https:"),
    maxAge: maxAgeSeconds,
  };
}

/**
 * The console's Content-Security-Policy: its pages load only their own files (http/page.tsx:
 * same-origin scripts and stylesheets, no inline script); charts set styles from script, hence
 * 'unsafe-inline' for styles only. Nothing may frame the console.
 */
export const CONSOLE_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
/** Live streams one console session may hold open in an isolate. */
export const CONSOLE_STREAMS_PER_SESSION = 4;

/**
 * Signed in, or: pages redirect to the login form, streams and posts answer 401. A verified cookie
 * is also checked server-side (services/console-sessions.ts: signed out, or "revoke all"): one MGET.
 */
const requireConsole = createMiddleware<ConsoleEnv>(async (c, next) => {
  const deps = c.get("deps");
  const verified = await verifySession(deps.config.ADMIN_TOKEN, getCookie(c, SESSION_COOKIE), deps.clock.now());
  const session = verified && (await consoleSessionAlive(deps, verified, c.req.method)) ? verified : null;
  if (!session) {
    if (c.req.method === "GET" && !c.req.path.endsWith("/events")) return c.redirect(LOGIN, 302);
    return c.html(
      <MessagePage title="Signed out" message="Sign in again: the console session is missing or has expired." />,
      401,
    );
  }
  c.set("session", session);
  await next();
});

/**
 * The request comes from one of our own pages: its Origin is the configured PUBLIC_URL's (or, without
 * one, Sec-Fetch-Site says same-origin). Never compared with the request's own URL: its host is the
 * client's Host header, which a rebound DNS name or a forwarding proxy lets an attacker choose.
 */
function sameOrigin(req: Request, publicUrl: string): boolean {
  const origin = req.headers.get("origin");
  if (origin === null || origin === "null") return req.headers.get("sec-fetch-site") === "same-origin";
  return origin === new URL(publicUrl).origin;
}

/** Same origin and the session's CSRF token in `_csrf`; the parsed form is in `c.var.form`. */
const requireCsrf = createMiddleware<ConsoleEnv>(async (c, next) => {
  const deps = c.get("deps");
  const refuse = (message: string) =>
    c.html(<MessagePage title="Refused" message={message} csrf={c.get("session").csrf} />, 403);
  if (!sameOrigin(c.req.raw, deps.config.PUBLIC_URL))
    return refuse("This form was not sent from the console's own pages.");
  const form = await boundedForm(c.req.raw);
  if (!form || !timingSafeEqual(form._csrf ?? "", c.get("session").csrf))
    return refuse("The form's CSRF token is missing or wrong: reload the page and try again.");
  c.set("form", form);
  await next();
});

const sseEvent = (s: SaleSnapshot) => ({ event: "stats", data: JSON.stringify(s) });

const isDecimalId = (id: string) => /^[1-9]\d{0,15}$/.test(id);

const RECONCILE_FLASHES: Record<string, Flash> = {
  ran: { ok: true, text: "Reconcile ran: the report below is the new one." },
  busy: { ok: false, text: "A reconcile run is in progress elsewhere (lock held): try again in a moment." },
};

/** The dead-letter page's URL filter: "" (none), or an http(s) URL; null when it is neither. */
function dlqUrlFilter(raw: string | undefined): string | null {
  const url = (raw ?? "").trim();
  if (url === "") return "";
  return url.length <= 2048 && /^https?:\/\//.test(url) && URL.canParse(url) ? url : null;
}

/** Where a dead-letter action sends the browser back to: the list (same filter) with what happened. */
function dlqBack(url: string, done: string, bulk?: BulkOutcome): string {
  const q = new URLSearchParams({ ...(url ? { url } : {}), done });
  if (bulk) {
    q.set("n", String(bulk.done));
    if (bulk.more) q.set("more", "1");
  }
  return `/console/dlq?${q.toString()}`;
}

function dlqFlash(q: Record<string, string | undefined>): Flash | undefined {
  const n = Number(q.n ?? 0);
  const more = q.more === "1" ? " Some are left: run it again." : "";
  const flashes: Record<string, Flash> = {
    redriven: { ok: true, text: "Re-driven: QStash delivers a fresh copy now." },
    deleted: { ok: true, text: "Deleted." },
    missing: { ok: false, text: "That entry is no longer in the dead-letter queue (re-driven or deleted meanwhile)." },
    "redriven-all": { ok: true, text: `Re-drove ${n} dead letter(s).${more}` },
    "deleted-all": { ok: true, text: `Deleted ${n} dead letter(s).${more}` },
    unconfirmed: { ok: false, text: "Nothing deleted: tick the box to delete them all." },
    failed: {
      ok: false,
      text: "QStash did not answer in time: the entry may or may not have changed; the list below is current.",
    },
  };
  return flashes[q.done ?? ""];
}

/** Runs a dead-letter action; a QStash failure sends the browser back with `done=failed` (the list shows what is true). */
async function dlqAction(log: Logger, url: string, act: () => Promise<string>): Promise<string> {
  try {
    return await act();
  } catch (err) {
    log.warn("console dead-letter action failed", { err });
    return dlqBack(url, "failed");
  }
}

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
    doc(
      page("sign in with the operator token (sets the HttpOnly, SameSite=Strict session cookie)", {
        responses: { ...html, 401: { description: "Wrong token" }, 403: { description: "Not same-origin" } },
      }),
      async (c) => {
        const deps = c.get("deps");
        if (!sameOrigin(c.req.raw, deps.config.PUBLIC_URL))
          return c.html(<LoginPage error="This form was not sent from the console's own pages." />, 403);
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
          await checkOperatorAttempt(
            deps,
            limitAddress(c, deps.config),
            timingSafeEqual(token, deps.config.ADMIN_TOKEN),
          );
        } catch (err) {
          if (err instanceof AppError && err.code === "RATE_LIMITED") {
            c.header("Retry-After", String(Math.max(1, Math.ceil(err.retryAfterSeconds ?? 1))));
            return c.html(<LoginPage error="Too many failed sign-ins from this address: try again later." />, 429);
          }
          if (err instanceof AppError && err.code === "UNAUTHORIZED")
            return c.html(<LoginPage error="Not the operator token." />, 401);
          throw err;
        }
        const { cookie } = await issueSession(deps.config.ADMIN_TOKEN, deps.clock.now());
        setCookie(c, SESSION_COOKIE, cookie, cookieOptions(deps.config.PUBLIC_URL, SESSION_TTL_MS / 1000));
        return c.redirect("/console", 303);
      },
    ),
  )
  .post(
    "/logout",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(post("sign out (ends the session server-side and clears its cookie)"), async (c) => {
      const deps = c.get("deps");
      // Server-side: the cookie stops working everywhere, also if someone kept a copy.
      await revokeConsoleSession(deps, c.get("session"));
      deleteCookie(c, SESSION_COOKIE, cookieOptions(deps.config.PUBLIC_URL, 0));
      return c.redirect(LOGIN, 303);
    }),
  )
  .get(
    "/",
    requireConsole,
    doc(page("seckill sales and their state (GET /admin/sales)"), async (c) => {
      const deps = c.get("deps");
      return c.html(
        <SalesPage
          csrf={c.get("session").csrf}
          rows={await salesOverview(deps)}
          zone={deps.config.SERVICE_TIME_ZONE}
        />,
      );
    }),
  )
  .get(
    "/vouchers",
    requireConsole,
    doc(page("voucher forms and the latest vouchers (GET /admin/vouchers)"), async (c) => {
      const deps = c.get("deps");
      const created = Number(c.req.query("created") ?? "") || undefined;
      return c.html(
        <VouchersPage
          csrf={c.get("session").csrf}
          rows={await latestVouchers(deps)}
          zone={deps.config.SERVICE_TIME_ZONE}
          created={created}
        />,
      );
    }),
  )
  .post(
    "/vouchers",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(
      post("create a normal voucher (POST /api/voucher's fields and rules; 400 with the errors next to the fields)", {
        responses: { ...html, 400: { description: "Invalid fields" } },
      }),
      async (c) => {
        const deps = c.get("deps");
        const values = c.get("form");
        const res = await submitVoucher(deps, values);
        if (res.ok) return c.redirect(`/console/vouchers?created=${res.voucherId}`, 303);
        return c.html(
          <VouchersPage
            csrf={c.get("session").csrf}
            rows={await latestVouchers(deps)}
            zone={deps.config.SERVICE_TIME_ZONE}
            form={{ kind: "normal", values, errors: res.errors }}
          />,
          400,
        );
      },
    ),
  )
  .post(
    "/vouchers/seckill",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(
      post(
        "create a seckill voucher (POST /api/voucher/seckill's fields and rules; 400 with the errors next to the fields)",
        { responses: { ...html, 400: { description: "Invalid fields" } } },
      ),
      async (c) => {
        const deps = c.get("deps");
        const values = c.get("form");
        const res = await submitSeckill(deps, values);
        if (res.ok) return c.redirect(`/console/sale/${res.voucherId}`, 303);
        return c.html(
          <VouchersPage
            csrf={c.get("session").csrf}
            rows={await latestVouchers(deps)}
            zone={deps.config.SERVICE_TIME_ZONE}
            form={{ kind: "seckill", values, errors: res.errors }}
          />,
          400,
        );
      },
    ),
  )
  .get(
    "/sale/:voucherId",
    requireConsole,
    doc(page("live view of one seckill sale", { params: VoucherParam }), async (c) => {
      const deps = c.get("deps");
      const csrf = c.get("session").csrf;
      const id = c.req.param("voucherId") ?? "";
      const cfg = isDecimalId(id) ? await saleConfig(deps, Number(id)) : null;
      if (!cfg)
        return c.html(
          <MessagePage title="No such sale" message={`Voucher ${id} is not a seckill voucher.`} csrf={csrf} />,
          404,
        );
      try {
        return c.html(
          <SalePage csrf={csrf} s={await saleSnapshot(deps, cfg)} cfg={cfg} zone={deps.config.SERVICE_TIME_ZONE} />,
        );
      } catch (err) {
        if (!(err instanceof ShardUnavailable)) throw err;
        return c.html(<MessagePage title="Sale not readable here" message={err.message} csrf={csrf} />, 503);
      }
    }),
  )
  .get(
    "/sale/:voucherId/events",
    requireConsole,
    doc(
      page(
        "the sale's numbers as server-sent events (`stats`, one per second; each stream ends after 5 minutes and the browser reconnects)",
        {
          params: VoucherParam,
          responses: {
            200: { description: "text/event-stream", content: { "text/event-stream": { schema: { type: "string" } } } },
            404: { description: "Not a seckill voucher" },
          },
        },
      ),
      async (c) => {
        const deps = c.get("deps");
        const id = c.req.param("voucherId") ?? "";
        const cfg = isDecimalId(id) ? await saleConfig(deps, Number(id)) : null;
        if (!cfg) return c.json(fail("NOT_FOUND", `voucher ${id} is not a seckill voucher`, c.get("requestId")), 404);
        const nonce = c.get("session").nonce;
        const open = deps.isolate.consoleStreams;
        if ((open.get(nonce) ?? 0) >= CONSOLE_STREAMS_PER_SESSION) {
          c.header("Retry-After", "5");
          return c.json(
            fail(
              "RATE_LIMITED",
              `at most ${CONSOLE_STREAMS_PER_SESSION} live streams per console session`,
              c.get("requestId"),
            ),
            429,
          );
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
    doc(
      page(
        "operations: dependency breakers, limiters, hot keys, reconcile report, writer, cache hit rates, UV per day, refunds (GET /admin/ops)",
      ),
      async (c) => {
        const deps = c.get("deps");
        return c.html(
          <OpsPage
            csrf={c.get("session").csrf}
            flash={RECONCILE_FLASHES[c.req.query("reconcile") ?? ""]}
            snapshot={await opsSnapshot(deps)}
            zone={deps.config.SERVICE_TIME_ZONE}
          />,
        );
      },
    ),
  )
  .post(
    "/ops/reconcile",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(post("run a reconcile now (the same locked run as POST /admin/reconcile)"), async (c) => {
      const res = await runJobNow(c.get("deps"), "reconcile");
      return c.redirect(`/console/ops?reconcile=${res.ran ? "ran" : "busy"}`, 303);
    }),
  )
  .get(
    "/orders",
    requireConsole,
    doc(page("order lookup by order id or user id (GET /admin/orders)"), async (c) => {
      const deps = c.get("deps");
      const zone = deps.config.SERVICE_TIME_ZONE;
      const id = (c.req.query("id") ?? "").trim();
      const userId = (c.req.query("userId") ?? "").trim();
      const csrf = c.get("session").csrf;
      const show = (orders: Parameters<typeof OrdersPage>[0]["orders"], error?: string) => (
        <OrdersPage csrf={csrf} id={id} userId={userId} error={error} orders={orders} zone={zone} />
      );
      if (id) {
        if (!isOrderId(id)) return c.html(show(null, "not an order id"), 400);
        const order = await orderById(deps, id);
        return c.html(show(order ? [order] : []));
      }
      if (userId) {
        if (!isDecimalId(userId)) return c.html(show(null, "not a user id"), 400);
        return c.html(show(await ordersOfUser(deps, Number(userId))));
      }
      return c.html(show(null));
    }),
  )
  .get(
    "/dlq",
    requireConsole,
    doc(page("dead-lettered QStash messages with re-drive and delete (GET /admin/dlq)"), async (c) => {
      const deps = c.get("deps");
      const csrf = c.get("session").csrf;
      const zone = deps.config.SERVICE_TIME_ZONE;
      const q = c.req.query();
      const flash = dlqFlash(q);
      const url = dlqUrlFilter(q.url);
      if (url === null)
        return c.html(
          <DlqPage
            csrf={csrf}
            zone={zone}
            page={null}
            url={q.url ?? ""}
            flash={{ ok: false, text: "The filter must be an http(s) URL." }}
          />,
          400,
        );
      const cursor = q.cursor && q.cursor.length <= 200 ? q.cursor : undefined;
      try {
        const list = await listDeadLetters(deps, { url: url || undefined, cursor, count: 50 });
        return c.html(<DlqPage csrf={csrf} zone={zone} page={list} url={url} flash={flash} />);
      } catch (err) {
        // The page still renders (its error named) while QStash is down: that is when it is needed.
        c.get("log").warn("console dead-letter list failed", { err });
        return c.html(
          <DlqPage csrf={csrf} zone={zone} page={null} url={url} flash={flash} error={scrubbedMessage(err)} />,
        );
      }
    }),
  )
  .post(
    "/dlq/retry-all",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(post("re-drive every dead letter, or those of the `url` filter (POST /admin/dlq/retry-all)"), async (c) => {
      const url = dlqUrlFilter(c.get("form").url) ?? "";
      return c.redirect(
        await dlqAction(c.get("log"), url, async () =>
          dlqBack(url, "redriven-all", await redriveAll(c.get("deps"), url ? { url } : {})),
        ),
        303,
      );
    }),
  )
  .post(
    "/dlq/delete-all",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(
      post("delete every dead letter, or those of the `url` filter, when `confirm=yes` (DELETE /admin/dlq)"),
      async (c) => {
        const form = c.get("form");
        const url = dlqUrlFilter(form.url) ?? "";
        if (form.confirm !== "yes") return c.redirect(dlqBack(url, "unconfirmed"), 303);
        return c.redirect(
          await dlqAction(c.get("log"), url, async () =>
            dlqBack(url, "deleted-all", await deleteAll(c.get("deps"), url ? { url } : {})),
          ),
          303,
        );
      },
    ),
  )
  .post(
    "/dlq/:id/retry",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(post("re-drive one dead letter (POST /admin/dlq/{id}/retry)", { params: DlqParam }), async (c) => {
      const id = c.req.param("id") ?? "";
      const url = dlqUrlFilter(c.get("form").url) ?? "";
      if (!DlqId.safeParse(id).success) return c.redirect(dlqBack(url, "missing"), 303);
      return c.redirect(
        await dlqAction(c.get("log"), url, async () =>
          dlqBack(url, (await redriveDeadLetter(c.get("deps"), id)).ok ? "redriven" : "missing"),
        ),
        303,
      );
    }),
  )
  .post(
    "/dlq/:id/delete",
    formBody(),
    requireConsole,
    requireCsrf,
    doc(post("delete one dead letter (DELETE /admin/dlq/{id})", { params: DlqParam }), async (c) => {
      const id = c.req.param("id") ?? "";
      const url = dlqUrlFilter(c.get("form").url) ?? "";
      if (!DlqId.safeParse(id).success) return c.redirect(dlqBack(url, "missing"), 303);
      return c.redirect(
        await dlqAction(c.get("log"), url, async () =>
          dlqBack(url, (await deleteDeadLetter(c.get("deps"), id)).ok ? "deleted" : "missing"),
        ),
        303,
      );
    }),
  )
  .get(
    `/assets/:file`,
    doc(
      page("a stylesheet or script of the console (uPlot's served as a static asset on Workers)", {
        description: "Public: library files and the console's own scripts.",
        params: AssetParam,
        responses: {
          200: {
            description: "The file",
            content: { "text/css": { schema: { type: "string" } }, "text/javascript": { schema: { type: "string" } } },
          },
          404: { description: "Not one of the console's files" },
        },
      }),
      async (c) => {
        const name = c.req.param("file") ?? "";
        if (Object.hasOwn(OWN_FILES, name)) {
          const f = OWN_FILES[name as OwnFile];
          return c.body(f.body, 200, { "content-type": f.type, "cache-control": "no-cache" });
        }
        const body = Object.hasOwn(VENDOR_FILES, name) ? await vendorFile(name as VendorFile) : null;
        if (!body) return c.json(fail("NOT_FOUND", `no asset ${name}`, c.get("requestId")), 404);
        return c.body(body, 200, {
          "content-type": VENDOR_FILES[name as VendorFile].type,
          "cache-control": "public, max-age=3600",
        });
      },
    ),
  );
