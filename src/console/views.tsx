/** @jsxImportSource hono/jsx */
/** The console's pages (hono/jsx, server-rendered; every asset same-origin, no inline script). */
import type { Child } from "hono/jsx";
import { Page } from "../routes/site.tsx";
import { ASSET_PREFIX } from "./assets.ts";
import { OUTCOMES } from "./counters.ts";
import type { FieldErrors, FormValues } from "./forms.ts";
import type { HotReport } from "../cache/hot.ts";
import type { ListingLimitSnapshot } from "../http/listing-limit.ts";
import type { AdmissionSnapshot } from "../services/seckill/admission.ts";
import type { SaleSnapshot } from "./sale.ts";

export const CSS_HREF = `${ASSET_PREFIX}console.css`;

export function Shell(props: { title: string; csrf?: string; children?: Child; styles?: string[]; scripts?: string[] }) {
  return (
    <Page title={`${props.title} — CityHub console`} styles={[CSS_HREF, ...(props.styles ?? [])]} scripts={props.scripts ?? []}>
      <header>
        <b>CityHub console</b>
        {props.csrf !== undefined && (
          <>
            <a href="/console">Sales</a>
            <a href="/console/vouchers">Vouchers</a>
            <a href="/console/ops">Operations</a>
            <a href="/console/orders">Orders</a>
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
        <input id="token" name="token" type="password" autocomplete="current-password" required aria-invalid={props.error ? "true" : undefined} />
        {props.error && <p class="err">{props.error}</p>}
        <div>
          <button type="submit">Sign in</button>
        </div>
        <p class="note">The operator token (ADMIN_TOKEN). The browser keeps a signed session cookie, never the token.</p>
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
      <input id={id} name={f.name} type={f.type ?? "text"} value={values[f.name] ?? ""} placeholder={f.placeholder} required={f.required} aria-invalid={err ? "true" : undefined} aria-describedby={err ? `${id}-err` : undefined} />
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
  { name: "beginTime", label: "Sale begins", placeholder: "YYYY-MM-DDTHH:mm:ss", required: true, hint: "Service time zone, or with Z / ±HH:MM" },
  { name: "endTime", label: "Sale ends", placeholder: "YYYY-MM-DDTHH:mm:ss", required: true },
  { name: "buckets", label: "Stock buckets (1–64)", placeholder: "1", hint: "Splits a hot voucher's stock over Redis keys" },
  { name: "shopDailyLimit", label: "Orders per user per day in this shop (0 = no rule)", placeholder: "0" },
  { name: "shopRuleLimit", label: "Shop rule: at most K orders per user…", hint: "Across the shop's vouchers with a shop rule; empty = no rule" },
  { name: "shopRuleDays", label: "…over the last N days (shop rule)" },
  { name: "campaign", label: "Campaign (per shop; required with a campaign rule)", placeholder: "summer-2026" },
  { name: "campaignRuleLimit", label: "Campaign rule: at most K orders per user…", hint: "Across this shop's vouchers of the campaign; empty = no rule" },
  { name: "campaignRuleDays", label: "…over the last N days (campaign rule)" },
];

export interface VoucherRow {
  id: number;
  shopId: number;
  title: string;
  type: number;
  payValue: number;
  actualValue: number;
  stock: number | null;
  begin: string | null;
  end: string | null;
  state: string;
}

export function VouchersPage(props: {
  csrf: string;
  rows: VoucherRow[];
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
              <td>{r.begin ? `${r.begin} → ${r.end}` : ""}</td>
              <td>{r.state}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </Shell>
  );
}

export interface SaleRow {
  voucherId: number;
  shopId: number;
  initial: number;
  stockLeft: number;
  begin: string;
  end: string;
  state: string;
}

export function SalesPage(props: { csrf: string; rows: SaleRow[] }) {
  return (
    <Shell title="Seckill sales" csrf={props.csrf}>
      <p class="note">Seckill vouchers not ended more than 7 days ago (the jobs' registry). Open one to watch it live.</p>
      <table>
        <thead>
          <tr>
            <th>voucher</th>
            <th>shop</th>
            <th>stock left / initial (Redis)</th>
            <th>window</th>
            <th>state</th>
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
                {r.begin} → {r.end}
              </td>
              <td>{r.state}</td>
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

export function SalePage(props: { csrf: string; s: SaleSnapshot; begin: string; end: string; limits: string[]; campaign: string | null; styles: string[]; scripts: string[] }) {
  const { s } = props;
  return (
    <Shell title={`Sale of voucher ${s.voucherId}`} csrf={props.csrf} styles={props.styles} scripts={props.scripts}>
      <div id="sale" data-events={`/console/sale/${s.voucherId}/events`}>
        <p class="note">
          Shop {s.shopId}, {props.begin} → {props.end} (service zone), initial stock {s.initial}. State: <b data-k="state">{s.state}</b>. Updated{" "}
          <span data-k="updated">now</span>.
        </p>
        <p class="note" data-k="limits">
          Campaign: {props.campaign ?? "none"}. Purchase limits besides one order per buyer: {props.limits.length === 0 ? "none" : props.limits.join("; ")}.
        </p>
        <div class="grid">
          <Stat k="stockLeft" label="stock left (Redis)" value={s.stockLeft} />
          <Stat k="reservations" label="reservations taken" value={s.reservations} />
          <Stat k="ordersInMysql" label="orders in MySQL" value={s.ordersInMysql} />
          <Stat k="mysqlStock" label="stock in MySQL" value={s.mysqlStock} />
          <Stat k="outboxPending" label="outbox pending (shop)" value={s.outboxPending} />
          <Stat k="writerLagMs" label="writer lag, ms" value={s.writerLagMs} />
          <Stat k="rate" label="attempts/s (this isolate)" value="0" />
        </div>
        <p class="note">
          Buckets: <span data-k="buckets">{s.buckets.join(" · ")}</span>
        </p>
        <div class="chart" id="chart-counts" />
        <div class="chart" id="chart-rate" />
        <h2>Attempts by outcome (this isolate, since it started)</h2>
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
              <th>answered by the fast lane from memory (all vouchers)</th>
              <td class="n" data-k="fastLaneSeckill">
                {s.fastLaneSeckill}
              </td>
            </tr>
          </tbody>
        </table>
        <p class="note">
          Outcomes are counted by the isolate serving this page, including the answers the fast lane gives from memory (sold-out memo, a buyer's own order);
          the last row is the fast lane's total over all vouchers.
        </p>
      </div>
    </Shell>
  );
}

/** A plain table of records (operations pages). */
export function Table(props: { rows: Record<string, unknown>[]; cols: string[] }) {
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
              const v = r[c];
              const text = v === null || v === undefined ? "" : Array.isArray(v) ? v.join("; ") : typeof v === "object" ? JSON.stringify(v) : String(v);
              return <td class={typeof v === "number" ? "n" : undefined}>{text}</td>;
            })}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function OpsPage(props: {
  csrf: string;
  flash?: { ok: boolean; text: string };
  reconcileAt: string | null;
  reconcile: Record<string, unknown>[];
  cache: Record<string, unknown>[];
  cacheIsolates: number;
  uv: Record<string, unknown>[];
  uvTotal: number;
  refunds: Record<string, unknown>[];
  pipeline: Record<string, unknown>;
  /** Sections whose dependency failed (shown empty), with the error. */
  unavailable: string[];
  /** resilienceSnapshot of the serving isolate, one row per dependency (lastOpenedAt formatted). */
  breakers: Record<string, unknown>[];
  /** GET /admin/cache/hot's report (top rows marked `promotedHere`); null when off or unavailable. */
  hot: { rule: HotReport["rule"]; top: Record<string, unknown>[]; promotedHere: HotReport["promotedHere"] } | null;
  admission: AdmissionSnapshot;
  /** Null when the listing limit is off (LISTING_IP_LIMIT=0). */
  listing: (Omit<ListingLimitSnapshot, "lastSyncAt"> & { lastSyncAt: string | null }) | null;
}) {
  const { admission: a, listing: l, hot } = props;
  const open = props.breakers.filter((b) => b.state !== "closed").map((b) => String(b.dependency));
  return (
    <Shell title="Operations" csrf={props.csrf}>
      {props.flash && <p class={props.flash.ok ? "flash" : "flash bad"}>{props.flash.text}</p>}
      {props.unavailable.length > 0 && (
        <p class="flash bad" data-k="unavailable">
          Shown empty, their dependency did not answer: {props.unavailable.join("; ")}.
        </p>
      )}
      <h2>Dependency breakers (this isolate)</h2>
      <p class="note" data-k="breakers-open">
        {open.length === 0 ? "All closed." : `Not closed: ${open.join(", ")} — non-core features are off while Redis's is, seckill fails closed.`} Per
        isolate, like GET /admin/resilience: another isolate may see otherwise.
      </p>
      <Table rows={props.breakers} cols={["dependency", "state", "timeoutMs", "calls", "failures", "timeouts", "rejected", "opened", "lastOpenedAt", "lastFailure", "retryAfterSeconds"]} />
      <h2>Hot keys (across isolates, this and the previous minute)</h2>
      {hot ? (
        <>
          <p class="note">
            Promoted at ≥ {hot.rule.reads} fresh L1 reads in {hot.rule.windowMs} ms; a promoted key stays fresh in L1 for {hot.rule.l1TtlMs} ms. Promoted in this
            isolate: <span data-k="promoted-here">{hot.promotedHere.length === 0 ? "none" : hot.promotedHere.map((k) => `${k.module}:${k.key}`).join(", ")}</span>.
          </p>
          <Table rows={hot.top} cols={["module", "key", "reads", "isolates", "promotedHere"]} />
        </>
      ) : (
        <p class="note">Off (HOT_KEY_READS=0) or unavailable.</p>
      )}
      <h2>Limiters (this isolate)</h2>
      <h3>Seckill admission</h3>
      <p class="note">
        {a.limits ? `At most ${a.limits.perVoucher} attempts per second per voucher, ${a.limits.total} across vouchers (deployment-wide).` : "Off (SECKILL_ADMISSION_PER_SECOND=0)."}{" "}
        Rate-limit blocks remembered: <b data-k="blocks">{a.blocks}</b> ({a.blocksActive} still running). Leases {a.stats.leases}, tokens granted {a.stats.granted},
        refused from memory {a.stats.refused} (admission) + {a.stats.blockedFromMemory} (blocks).
      </p>
      <Table rows={a.gates as unknown as Record<string, unknown>[]} cols={["voucherId", "tokens", "spent", "seen", "leasing"]} />
      <h3>Listing limit per address</h3>
      {l ? (
        <>
          <p class="note">
            {l.limit} requests per {l.windowMs} ms per address. Tracked <b data-k="listing-tracked">{l.tracked}</b> / {l.max}, at the limit now{" "}
            <b data-k="listing-blocked">{l.blocked}</b>, waiting for the sync {l.pendingSync}, last sync {l.lastSyncAt ?? "never"}.
          </p>
          <Table rows={l.top} cols={["address", "estimate", "blocked"]} />
        </>
      ) : (
        <p class="note">Off (LISTING_IP_LIMIT=0).</p>
      )}
      <h2>Reconcile (Redis ↔ MySQL)</h2>
      <p class="note">Last report: {props.reconcileAt ?? "never"}. The cron runs it every minute.</p>
      <form method="post" action="/console/ops/reconcile">
        <Csrf token={props.csrf} />
        <button type="submit">Run reconcile now</button>
      </form>
      <Table rows={props.reconcile} cols={["voucherId", "shopId", "initial", "redisStock", "buyers", "pending", "mysqlStock", "activeOrders", "ok", "drift", "repaired"]} />
      <h2>Order writer (this isolate)</h2>
      <Table rows={[props.pipeline]} cols={Object.keys(props.pipeline)} />
      <h2>Cache hit rates per module</h2>
      <p class="note">Summed across {props.cacheIsolates} isolates that reported.</p>
      <Table rows={props.cache} cols={["module", "hitRatio", "l1Hits", "l2Hits", "staleServes", "originLoads"]} />
      <h2>Unique visitors per day</h2>
      <p class="note">Over the range: {props.uvTotal}.</p>
      <Table rows={props.uv} cols={["date", "uv"]} />
      <h2>Refunds (newest 20)</h2>
      <Table rows={props.refunds} cols={["id", "orderId", "amount", "state", "attempts", "lastError", "nextAttemptAt", "createTime"]} />
      <h2>Dead-lettered QStash messages</h2>
      <p class="note">
        Not shown: the app's queue port (<code>deps.queue</code>) can publish only; listing and re-driving the dead-letter queue needs the QStash DLQ API, which
        it does not carry.
      </p>
    </Shell>
  );
}

export function OrdersPage(props: { csrf: string; id: string; userId: string; error?: string; rows: Record<string, unknown>[] | null }) {
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
      {props.rows && <Table rows={props.rows} cols={["id", "userId", "voucherId", "status", "createTime", "payTime"]} />}
    </Shell>
  );
}
