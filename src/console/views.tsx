/** @jsxImportSource hono/jsx */
/**
 * The console's pages (hono/jsx, server-rendered; every asset same-origin, no inline script). Each
 * page takes the typed snapshot its route read from a service (services/ops.ts, vouchers.ts,
 * dlq.ts — the same ones /admin answers as JSON) and the service time zone; formatting for people
 * (times, words) happens here and nowhere else.
 */
import type { Child } from "hono/jsx";
import { Page } from "../http/page.tsx";
import type { DeadLetter, DeadLetterPage } from "../services/dlq.ts";
import type { OpsSnapshot, OrderView, SaleRow } from "../services/ops.ts";
import type { SeckillConfig } from "../services/seckill/config.ts";
import type { VoucherRow } from "../services/vouchers.ts";
import { formatInZone } from "../util/time.ts";
import { ASSET_PREFIX } from "./assets.ts";
import { OUTCOMES } from "../services/sale-counters.ts";
import type { FieldErrors, FormValues } from "./forms.ts";
import { type SaleSnapshot, saleLimits } from "./sale.ts";

export const CSS_HREF = `${ASSET_PREFIX}console.css`;

/** An epoch-ms time in the service zone, or "" for none. */
const at = (ms: number | null, zone: string) => (ms === null ? "" : formatInZone(ms, zone));

export function Shell(props: {
  title: string;
  csrf?: string;
  children?: Child;
  styles?: string[];
  scripts?: string[];
}) {
  return (
    <Page
      title={`${props.title} — CityHub console`}
      styles={[CSS_HREF, ...(props.styles ?? [])]}
      scripts={props.scripts ?? []}
    >
      <header>
        <b>CityHub console</b>
        {props.csrf !== undefined && (
          <>
            <a href="/console">Sales</a>
            <a href="/console/vouchers">Vouchers</a>
            <a href="/console/ops">Operations</a>
            <a href="/console/orders">Orders</a>
            <a href="/console/dlq">Dead letters</a>
            <form method="post" action="/console/logout">
              <input type="hidden" name="_csrf" value={props.csrf} />
              <button type="submit">Sign out</button>
            </form>
          </>
        )}
      </header>
      <main>
        <h1>{props.title}</h1>
        {props.children}
      </main>
    </Page>
  );
}

export function LoginPage(props: { error?: string }) {
  return (
    <Shell title="Sign in">
      <form class="card" method="post" action="/console/login">
        <label for="token">Operator token</label>
        <input
          id="token"
          name="token"
          type="password"
          autocomplete="current-password"
          required
          aria-invalid={props.error ? "true" : undefined}
        />
        {props.error && <p class="err">{props.error}</p>}
        <div>
          <button type="submit">Sign in</button>
        </div>
        <p class="note">
          The operator token (ADMIN_TOKEN). The browser keeps a signed session cookie, never the token.
        </p>
      </form>
    </Shell>
  );
}

export function MessagePage(props: { title: string; message: string; csrf?: string }) {
  return (
    <Shell title={props.title} csrf={props.csrf}>
      <p class="flash bad">{props.message}</p>
    </Shell>
  );
}

export function Csrf(props: { token: string }) {
  return <input type="hidden" name="_csrf" value={props.token} />;
}

/** A flash line above a page's content: good news, or bad. */
export interface Flash {
  ok: boolean;
  text: string;
}

function FlashLine(props: { flash?: Flash }) {
  return props.flash ? <p class={props.flash.ok ? "flash" : "flash bad"}>{props.flash.text}</p> : null;
}

interface FieldSpec {
  name: string;
  label: string;
  type?: string;
  placeholder?: string;
  required?: boolean;
  hint?: string;
}

function Field(props: { f: FieldSpec; values: FormValues; errors: FieldErrors; prefix: string }) {
  const { f, values, errors, prefix } = props;
  const id = `${prefix}-${f.name}`;
  const err = errors[f.name];
  return (
    <div>
      <label for={id}>{f.label}</label>
      <input
        id={id}
        name={f.name}
        type={f.type ?? "text"}
        value={values[f.name] ?? ""}
        placeholder={f.placeholder}
        required={f.required}
        aria-invalid={err ? "true" : undefined}
        aria-describedby={err ? `${id}-err` : undefined}
      />
      {err && (
        <p class="err" id={`${id}-err`} data-field={f.name}>
          {err}
        </p>
      )}
      {f.hint && <p class="note">{f.hint}</p>}
    </div>
  );
}

const BASE_FIELDS: FieldSpec[] = [
  { name: "shopId", label: "Shop id", required: true },
  { name: "title", label: "Title", required: true },
  { name: "subTitle", label: "Subtitle" },
  { name: "rules", label: "Rules" },
  { name: "payValue", label: "Price (cents)", required: true },
  { name: "actualValue", label: "Face value (cents)", required: true },
];
const SECKILL_FIELDS: FieldSpec[] = [
  ...BASE_FIELDS,
  { name: "stock", label: "Stock", required: true },
  {
    name: "beginTime",
    label: "Sale begins",
    placeholder: "YYYY-MM-DDTHH:mm:ss",
    required: true,
    hint: "Service time zone, or with Z / ±HH:MM",
  },
  { name: "endTime", label: "Sale ends", placeholder: "YYYY-MM-DDTHH:mm:ss", required: true },
  {
    name: "buckets",
    label: "Stock buckets (1–64)",
    placeholder: "1",
    hint: "Splits a hot voucher's stock over Redis keys",
  },
  { name: "shopDailyLimit", label: "Orders per user per day in this shop (0 = no rule)", placeholder: "0" },
  {
    name: "shopRuleLimit",
    label: "Shop rule: at most K orders per user…",
    hint: "Across the shop's vouchers with a shop rule; empty = no rule",
  },
  { name: "shopRuleDays", label: "…over the last N days (shop rule)" },
  { name: "campaign", label: "Campaign (per shop; required with a campaign rule)", placeholder: "summer-2026" },
  {
    name: "campaignRuleLimit",
    label: "Campaign rule: at most K orders per user…",
    hint: "Across this shop's vouchers of the campaign; empty = no rule",
  },
  { name: "campaignRuleDays", label: "…over the last N days (campaign rule)" },
];

export function VouchersPage(props: {
  csrf: string;
  rows: VoucherRow[];
  zone: string;
  created?: number;
  form?: { kind: "normal" | "seckill"; values: FormValues; errors: FieldErrors };
}) {
  const f = props.form;
  const empty: { values: FormValues; errors: FieldErrors } = { values: {}, errors: {} };
  const normal = f?.kind === "normal" ? f : empty;
  const seckill = f?.kind === "seckill" ? f : empty;
  return (
    <Shell title="Vouchers" csrf={props.csrf}>
      {props.created !== undefined && <p class="flash">Voucher {props.created} created.</p>}
      {f && <p class="flash bad">The voucher was not created: see the fields marked below.</p>}
      <h2>New seckill voucher</h2>
      <form class="card" method="post" action="/console/vouchers/seckill">
        <Csrf token={props.csrf} />
        {SECKILL_FIELDS.map((x) => (
          <Field f={x} values={seckill.values} errors={seckill.errors} prefix="seckill" />
        ))}
        {seckill.errors.form && <p class="err">{seckill.errors.form}</p>}
        <button type="submit">Create seckill voucher</button>
      </form>
      <h2>New normal voucher</h2>
      <form class="card" method="post" action="/console/vouchers">
        <Csrf token={props.csrf} />
        {BASE_FIELDS.map((x) => (
          <Field f={x} values={normal.values} errors={normal.errors} prefix="normal" />
        ))}
        <button type="submit">Create voucher</button>
      </form>
      <h2>Latest vouchers</h2>
      <table>
        <thead>
          <tr>
            <th>id</th>
            <th>shop</th>
            <th>title</th>
            <th>kind</th>
            <th>price / value</th>
            <th>stock (MySQL)</th>
            <th>window</th>
            <th>state</th>
          </tr>
        </thead>
        <tbody>
          {props.rows.map((r) => (
            <tr>
              <td class="n">{r.type === 1 ? <a href={`/console/sale/${r.id}`}>{r.id}</a> : r.id}</td>
              <td class="n">{r.shopId}</td>
              <td>{r.title}</td>
              <td>{r.type === 1 ? "seckill" : "normal"}</td>
              <td class="n">
                {r.payValue} / {r.actualValue}
              </td>
              <td class="n">{r.stock ?? ""}</td>
              <td>{r.beginMs !== null ? `${at(r.beginMs, props.zone)} → ${at(r.endMs, props.zone)}` : ""}</td>
              <td>{r.state}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </Shell>
  );
}

export function SalesPage(props: { csrf: string; rows: SaleRow[]; zone: string }) {
  return (
    <Shell title="Seckill sales" csrf={props.csrf}>
      <p class="note">
        Seckill vouchers not ended more than 7 days ago (the jobs' registry). Open one to watch it live.
      </p>
      <table>
        <thead>
          <tr>
            <th>voucher</th>
            <th>shop</th>
            <th>stock left / initial (Redis)</th>
            <th>window</th>
            <th>state</th>
            <th>shards</th>
          </tr>
        </thead>
        <tbody>
          {props.rows.map((r) => (
            <tr>
              <td class="n">
                <a href={`/console/sale/${r.voucherId}`}>{r.voucherId}</a>
              </td>
              <td class="n">{r.shopId}</td>
              <td class="n">
                {r.stockLeft} / {r.initial}
              </td>
              <td>
                {at(r.beginMs, props.zone)} → {at(r.endMs, props.zone)}
              </td>
              <td>{r.state}</td>
              <td class="n">
                {r.shards === 0
                  ? "main"
                  : r.unreadShards > 0
                    ? `${r.shards} (${r.unreadShards} not configured here: not counted)`
                    : r.shards}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {props.rows.length === 0 && (
        <p>
          No seckill sale yet: <a href="/console/vouchers">create one</a>.
        </p>
      )}
    </Shell>
  );
}

function Stat(props: { k: string; label: string; value: string | number }) {
  return (
    <div class="stat">
      <span>{props.label}</span>
      <b data-k={props.k}>{props.value}</b>
    </div>
  );
}

/** A sharded sale's shards (services/seckill/shards.ts), updated live by sale.js through their data-k keys. */
function ShardTable(props: { s: SaleSnapshot }) {
  const { s } = props;
  return (
    <>
      <h2>Shards</h2>
      <p class="note">
        The stock lives in {s.shardCount} seckill shard databases. Each buyer buys from one (their home shard); a shard
        that runs dry takes stock from the others. In each shard stock + buyers = its share.
      </p>
      <table id="shards">
        <thead>
          <tr>
            <th>shard</th>
            <th>stock</th>
            <th>buyers</th>
            <th>share</th>
          </tr>
        </thead>
        <tbody>
          {s.shards.map((x) => (
            <tr>
              <td class="n">{x.shard}</td>
              <td class="n" data-k={`shard-${x.shard}-stock`}>
                {x.stock}
              </td>
              <td class="n" data-k={`shard-${x.shard}-buyers`}>
                {x.buyers}
              </td>
              <td class="n" data-k={`shard-${x.shard}-share`}>
                {x.share ?? "not loaded"}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

/** The live sale page: its numbers now, updated by sale.js from the page's event stream. */
export function SalePage(props: {
  csrf: string;
  s: SaleSnapshot;
  cfg: Pick<SeckillConfig, "dailyLimit" | "purchaseRules" | "campaign">;
  zone: string;
}) {
  const { s } = props;
  const limits = saleLimits(props.cfg);
  return (
    <Shell
      title={`Sale of voucher ${s.voucherId}`}
      csrf={props.csrf}
      styles={[`${ASSET_PREFIX}uPlot.min.css`]}
      scripts={[`${ASSET_PREFIX}uPlot.iife.min.js`, `${ASSET_PREFIX}sale.js`]}
    >
      <div id="sale" data-events={`/console/sale/${s.voucherId}/events`}>
        <p class="note">
          Shop {s.shopId}, {at(s.beginMs, props.zone)} → {at(s.endMs, props.zone)} (service zone), initial stock{" "}
          {s.initial}. State: <b data-k="state">{s.state}</b>. Updated <span data-k="updated">now</span>.
        </p>
        <p class="note" data-k="limits">
          Campaign: {props.cfg.campaign ?? "none"}. Purchase limits besides one order per buyer:{" "}
          {limits.length === 0 ? "none" : limits.join("; ")}.
        </p>
        <div class="grid">
          <Stat
            k="stockLeft"
            label={s.shardCount > 0 ? "stock left (Redis, all shards)" : "stock left (Redis)"}
            value={s.stockLeft}
          />
          <Stat k="reservations" label="reservations taken" value={s.reservations} />
          <Stat k="ordersInMysql" label="orders in MySQL" value={s.ordersInMysql} />
          <Stat k="mysqlStock" label="stock in MySQL" value={s.mysqlStock} />
          <Stat k="outboxPending" label="outbox pending (shop)" value={s.outboxPending} />
          <Stat k="writerLagMs" label="writer lag, ms" value={s.writerLagMs} />
          <Stat k="rate" label="attempts/s" value="0" />
        </div>
        <p class="note">
          Buckets{s.shardCount > 0 ? " (summed over the shards)" : ""}:{" "}
          <span data-k="buckets">{s.buckets.join(" · ")}</span>
        </p>
        {s.shardCount > 0 && <ShardTable s={s} />}
        <div class="chart" id="chart-counts" />
        <div class="chart" id="chart-rate" />
        <h2>
          Attempts by outcome ({s.outcomesAcrossIsolates ? "all isolates" : "this isolate only: Redis did not answer"})
        </h2>
        <table>
          <tbody>
            {OUTCOMES.map((o) => (
              <tr>
                <th>{o === "ok" ? "reserved" : o}</th>
                <td class="n" data-k={`o-${o}`}>
                  {s.outcomes[o]}
                </td>
              </tr>
            ))}
            <tr>
              <th>answered by the fast lane from memory (all vouchers, this isolate)</th>
              <td class="n" data-k="fastLaneSeckill">
                {s.fastLaneSeckill}
              </td>
            </tr>
          </tbody>
        </table>
        <p class="note">
          Outcomes are summed across isolates (each isolate adds its counts every few seconds), including the answers
          the fast lane gives from memory (sold-out memo, a buyer's own order); the last row is the serving isolate's
          fast-lane total over all vouchers.
        </p>
      </div>
    </Shell>
  );
}

type CellValue = string | number | boolean | null | undefined | readonly unknown[] | object;

/** A plain table of records, one column per named field (operations pages). */
export function Table<R extends { [K in C]: CellValue }, C extends keyof R & string>(props: {
  rows: readonly R[];
  cols: readonly C[];
}) {
  if (props.rows.length === 0) return <p class="note">None.</p>;
  return (
    <table>
      <thead>
        <tr>
          {props.cols.map((c) => (
            <th>{c}</th>
          ))}
        </tr>
      </thead>
      <tbody>
        {props.rows.map((r) => (
          <tr>
            {props.cols.map((c) => {
              const v: CellValue = r[c];
              const text =
                v === null || v === undefined
                  ? ""
                  : Array.isArray(v)
                    ? v.join("; ")
                    : typeof v === "object"
                      ? JSON.stringify(v)
                      : String(v);
              return <td class={typeof v === "number" ? "n" : undefined}>{text}</td>;
            })}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function OpsPage(props: { csrf: string; flash?: Flash; snapshot: OpsSnapshot; zone: string }) {
  const { snapshot: o, zone } = props;
  const { admission: a, listing: l, hot } = o;
  const breakers = Object.entries(o.breakers).map(([dependency, g]) => ({
    dependency,
    ...g,
    lastOpenedAt: at(g.lastOpenedAt, zone),
  }));
  const open = breakers.filter((b) => b.state !== "closed").map((b) => b.dependency);
  const promotedHere = new Set((hot?.promotedHere ?? []).map((k) => `${k.module}:${k.key}`));
  const hotTop = (hot?.top ?? []).map((k) => ({
    ...k,
    promotedHere: promotedHere.has(`${k.module}:${k.key}`) ? "yes" : "",
  }));
  const cache = Object.entries(o.cache.modules).map(([module, m]) => ({ module, ...m }));
  const refunds = o.refunds.map((r) => ({
    ...r,
    nextAttemptAt: at(r.nextAttemptAt, zone),
    createTime: at(r.createTime, zone),
  }));
  const writerCols = Object.keys(o.writer) as (keyof typeof o.writer)[];
  return (
    <Shell title="Operations" csrf={props.csrf}>
      <FlashLine flash={props.flash} />
      {o.unavailable.length > 0 && (
        <p class="flash bad" data-k="unavailable">
          Shown empty, their dependency did not answer:{" "}
          {o.unavailable.map((u) => `${u.section}: ${u.error}`).join("; ")}.
        </p>
      )}
      <h2>Dependency breakers (this isolate)</h2>
      <p class="note" data-k="breakers-open">
        {open.length === 0
          ? "All closed."
          : `Not closed: ${open.join(", ")} — non-core features are off while Redis's is, seckill fails closed.`}{" "}
        Per isolate, like GET /admin/resilience: another isolate may see otherwise.
      </p>
      <Table
        rows={breakers}
        cols={[
          "dependency",
          "state",
          "timeoutMs",
          "calls",
          "failures",
          "timeouts",
          "rejected",
          "opened",
          "lastOpenedAt",
          "lastFailure",
          "retryAfterSeconds",
        ]}
      />
      <h2>Hot keys (across isolates, this and the previous minute)</h2>
      {hot ? (
        <>
          <p class="note">
            Promoted at ≥ {hot.rule.reads} fresh L1 reads in {hot.rule.windowMs} ms; a promoted key stays fresh in L1
            for {hot.rule.l1TtlMs} ms. Promoted in this isolate:{" "}
            <span data-k="promoted-here">
              {hot.promotedHere.length === 0 ? "none" : hot.promotedHere.map((k) => `${k.module}:${k.key}`).join(", ")}
            </span>
            .
          </p>
          <Table rows={hotTop} cols={["module", "key", "reads", "isolates", "promotedHere"]} />
        </>
      ) : (
        <p class="note">Off (HOT_KEY_READS=0) or unavailable.</p>
      )}
      <h2>Limiters (this isolate)</h2>
      <h3>Seckill admission</h3>
      <p class="note">
        {a.limits
          ? `At most ${a.limits.perVoucher} attempts per second per voucher, ${a.limits.total} across vouchers (deployment-wide).`
          : "Off (SECKILL_ADMISSION_PER_SECOND=0)."}{" "}
        Rate-limit blocks remembered: <b data-k="blocks">{a.blocks}</b> ({a.blocksActive} still running). Leases{" "}
        {a.stats.leases}, tokens granted {a.stats.granted}, refused from memory {a.stats.refused} (admission) +{" "}
        {a.stats.blockedFromMemory} (blocks).
      </p>
      <Table rows={a.gates} cols={["voucherId", "tokens", "spent", "seen", "leasing"]} />
      <h3>Listing limit per address</h3>
      {l ? (
        <>
          <p class="note">
            {l.limit} requests per {l.windowMs} ms per address. Tracked <b data-k="listing-tracked">{l.tracked}</b> /{" "}
            {l.max}, at the limit now <b data-k="listing-blocked">{l.blocked}</b>, waiting for the sync {l.pendingSync},
            last sync {l.lastSyncAt === null ? "never" : at(l.lastSyncAt, zone)}.
          </p>
          <Table rows={l.top} cols={["address", "estimate", "blocked"]} />
        </>
      ) : (
        <p class="note">Off (LISTING_IP_LIMIT=0).</p>
      )}
      <h2>Reconcile (Redis ↔ MySQL)</h2>
      <p class="note">
        Last report: {o.reconcile?.at ? at(o.reconcile.at, zone) : "never"}. The cron runs it every minute.
      </p>
      <form method="post" action="/console/ops/reconcile">
        <Csrf token={props.csrf} />
        <button type="submit">Run reconcile now</button>
      </form>
      <Table
        rows={o.reconcile?.vouchers ?? []}
        cols={[
          "voucherId",
          "shopId",
          "initial",
          "redisStock",
          "buyers",
          "pending",
          "mysqlStock",
          "activeOrders",
          "ok",
          "drift",
          "repaired",
        ]}
      />
      <h2>Order writer (this isolate)</h2>
      <Table rows={[o.writer]} cols={writerCols} />
      <h2>Cache hit rates per module</h2>
      <p class="note">Summed across {o.cache.isolates} isolates that reported.</p>
      <Table rows={cache} cols={["module", "hitRatio", "l1Hits", "l2Hits", "staleServes", "originLoads"]} />
      <h2>Unique visitors per day</h2>
      <p class="note">Over the range: {o.uv.total}.</p>
      <Table rows={o.uv.days} cols={["date", "uv"]} />
      <h2>Refunds (newest 20)</h2>
      <Table
        rows={refunds}
        cols={["id", "orderId", "amount", "state", "attempts", "lastError", "nextAttemptAt", "createTime"]}
      />
      <h2>Dead-lettered QStash messages</h2>
      <p class="note">
        Listed, re-driven and deleted on <a href="/console/dlq">Dead letters</a> (GET /admin/dlq and its actions in the
        API).
      </p>
    </Shell>
  );
}

export function OrdersPage(props: {
  csrf: string;
  id: string;
  userId: string;
  error?: string;
  orders: OrderView[] | null;
  zone: string;
}) {
  const rows = props.orders?.map((o) => ({
    id: o.id,
    userId: o.userId,
    voucherId: o.voucherId,
    status: o.status === "queued" ? "queued (in the outbox)" : o.status,
    createTime: at(o.createdAt, props.zone),
    payTime: at(o.paidAt, props.zone),
  }));
  return (
    <Shell title="Order lookup" csrf={props.csrf}>
      <form class="card" method="get" action="/console/orders">
        <label for="order-id">Order id</label>
        <input id="order-id" name="id" value={props.id} />
        <label for="order-user">or user id (newest 20)</label>
        <input id="order-user" name="userId" value={props.userId} />
        {props.error && <p class="err">{props.error}</p>}
        <div>
          <button type="submit">Look up</button>
        </div>
      </form>
      {rows && <Table rows={rows} cols={["id", "userId", "voucherId", "status", "createTime", "payTime"]} />}
    </Shell>
  );
}

/** One POST form of the dead-letter page: a button, the CSRF token, and hidden fields. */
function DlqAction(props: {
  csrf: string;
  action: string;
  label: string;
  danger?: boolean;
  fields?: Record<string, string>;
  children?: Child;
}) {
  return (
    <form method="post" action={props.action}>
      <Csrf token={props.csrf} />
      {Object.entries(props.fields ?? {}).map(([name, value]) => (
        <input type="hidden" name={name} value={value} />
      ))}
      {props.children}
      <button type="submit" class={props.danger ? "danger" : undefined}>
        {props.label}
      </button>
    </form>
  );
}

function DeadLetterRow(props: { m: DeadLetter; csrf: string; zone: string; filter: Record<string, string> }) {
  const { m } = props;
  const id = encodeURIComponent(m.dlqId);
  return (
    <tr data-dlq={m.dlqId}>
      <td>
        {m.dlqId}
        <br />
        <span class="note">message {m.messageId}</span>
      </td>
      <td>{at(m.createdAt, props.zone)}</td>
      <td class="excerpt">
        {m.method} {m.url}
      </td>
      <td class="n" data-k="status">
        {m.responseStatus ?? "no answer"}
      </td>
      <td class="excerpt" data-k="response">
        {m.responseExcerpt || m.error || ""}
      </td>
      <td class="excerpt" data-k="body">
        {m.bodyExcerpt}
      </td>
      <td>
        <DlqAction csrf={props.csrf} action={`/console/dlq/${id}/retry`} label="Re-drive" fields={props.filter} />
        <DlqAction csrf={props.csrf} action={`/console/dlq/${id}/delete`} label="Delete" danger fields={props.filter} />
      </td>
    </tr>
  );
}

/**
 * The dead-letter queue: one page of entries (newest first) with the failed callback's status and
 * answer, re-drive or delete each, or all of them (those matching the URL filter, when one is set).
 */
export function DlqPage(props: {
  csrf: string;
  zone: string;
  page: DeadLetterPage | null;
  error?: string;
  flash?: Flash;
  url: string;
}) {
  const { page, url } = props;
  const filter: Record<string, string> = url ? { url } : {};
  const scope = url ? "matching the filter" : "in the queue";
  return (
    <Shell title="Dead letters" csrf={props.csrf}>
      <FlashLine flash={props.flash} />
      <p class="note">
        QStash messages whose delivery failed past their retries. Re-driving publishes a fresh copy, due now (our
        callbacks are idempotent: a message that had in fact been handled changes nothing), and removes the entry.
        Bodies and answers are excerpts, secrets scrubbed.
      </p>
      <form class="card" method="get" action="/console/dlq">
        <label for="dlq-url">Destination URL (exact; empty = all)</label>
        <input id="dlq-url" name="url" value={url} />
        <div>
          <button type="submit">Filter</button>
        </div>
      </form>
      {props.error && (
        <p class="flash bad" data-k="unavailable">
          The dead-letter queue did not answer: {props.error}
        </p>
      )}
      {page && page.messages.length === 0 && <p class="note">No dead letters {scope}.</p>}
      {page && page.messages.length > 0 && (
        <>
          <div class="actions">
            <DlqAction
              csrf={props.csrf}
              action="/console/dlq/retry-all"
              label={`Re-drive all ${scope}`}
              fields={filter}
            />
            <DlqAction
              csrf={props.csrf}
              action="/console/dlq/delete-all"
              label={`Delete all ${scope}`}
              danger
              fields={filter}
            >
              <label>
                <input type="checkbox" name="confirm" value="yes" required /> yes, delete them
              </label>{" "}
            </DlqAction>
          </div>
          <table>
            <thead>
              <tr>
                <th>entry</th>
                <th>published</th>
                <th>destination</th>
                <th>status</th>
                <th>answer</th>
                <th>body</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {page.messages.map((m) => (
                <DeadLetterRow m={m} csrf={props.csrf} zone={props.zone} filter={filter} />
              ))}
            </tbody>
          </table>
          {page.cursor && (
            <p>
              <a href={`/console/dlq?${new URLSearchParams({ ...filter, cursor: page.cursor }).toString()}`}>
                Next page
              </a>
            </p>
          )}
        </>
      )}
    </Shell>
  );
}
