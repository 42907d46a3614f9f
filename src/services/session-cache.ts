/**
 * The isolate's session cache: what one isolate may believe about sessions without asking Redis,
 * and the one background command per SESSION_SYNC_MS (lua/session-sync.lua) that keeps it honest:
 * it confirms sessions first seen here, renews idle timeouts due, and reads the revocations.
 * A known token is answered from memory; an unseen signed one is verified (CPU only) and queued for
 * confirmation; an unseen legacy one costs one HMGET, metered per address.
 * Invariants: memory is trusted only while the last successful sync *began* less than
 * SESSION_TRUST_MS ago — so a logout anywhere is honoured everywhere within that bound — and a
 * Redis failure never widens it (past it, requests wait for a sync or fail). Memory is bounded by
 * SESSION_CACHE_MAX (LRU). Re-issue (`reissue`) costs one EXPIRE, which proves the record still
 * exists; every token of a session ends with it, by sid.
 * The full reasoning: docs/modules.md "services/session-cache.ts", docs/architecture.md "Sessions".
 */
import { LRUCache } from "lru-cache";
import type { Deps } from "../deps.ts";
import type { Config } from "../env.ts";
import { keys } from "../redis/keys.ts";
import { scriptsFor } from "../redis/scripts.ts";
import {
  LEGACY_TOKEN_RE,
  legacySid,
  readLegacySession,
  revokeSession,
  type SessionClaims,
  SessionKeys,
  type SessionUser,
} from "./session.ts";

/** Dead session ids an isolate remembers (~100 B each). */
const REVOKED_MEMORY = 100_000;
/**
 * An unseen legacy token from an address past its miss budget (isolate.missMeter): not looked up.
 * `retryAfterMs`: until the address's window ends. The guards answer 429 (requireUser) or treat
 * the caller as anonymous (optionalUser).
 */
export class LegacyLookupRefused extends Error {
  constructor(readonly retryAfterMs: number) {
    super("too many unknown session tokens from this address");
    this.name = "LegacyLookupRefused";
  }
}

/** Unknown legacy tokens an isolate remembers as refused. */
const NEGATIVE_MAX = 10_000;

/** Sessions confirmed/renewed by one sync command (bounds the request body: ~260 bytes each). */
const SYNC_BATCH = 500;
/** Revocations read by one sync command. */
const REVOCATIONS_PER_SYNC = 1_000;
/** A sync loops (one command per round) while a batch or the revocation read was full, up to this. */
const MAX_ROUNDS = 20;

interface Entry {
  /** null: known dead (revoked, expired, or a legacy token with no record) — refused from memory. */
  user: SessionUser | null;
  sid: string;
  /**
   * Start (isolate clock, ms) of the sync whose EXPIRE last found this session and renewed it,
   * or -Infinity: never confirmed by this isolate (first seen, or forgotten).
   */
  confirmedAt: number;
  /** The token's absolute end, epoch ms (its `exp`; Infinity for legacy tokens). */
  expiresAt: number;
  /** Sign-in time, epoch seconds (carried into re-issued tokens; 0 for legacy tokens). */
  authTime: number;
  /** From when a request with this token is handed a fresh one, epoch ms (Infinity: never). */
  reissueAt: number;
  /**
   * The token this isolate re-issued for this one, handed again to later requests that still send
   * this token (a client that did not pick it up, or concurrent requests): one write per session
   * and isolate, not one per request.
   */
  reissued?: { token: string; entry: Entry };
  /** In `pending`, waiting for the next sync. */
  queued: boolean;
}

/** A fresh token for the session a request presented; `live` turns false once the session ends (e.g. the request was its logout). */
export interface Reissued {
  readonly token: string;
  readonly live: boolean;
}

export interface SessionCacheStats {
  entries: number;
  pending: number;
  syncs: number;
  syncFailures: number;
  lastSyncAt: number | null;
}

export class SessionCache {
  /** Signing keys, imported once per isolate. */
  readonly keys: SessionKeys;
  /** token → entry; Map order is recency (re-inserted on use), oldest first. */
  private readonly entries = new Map<string, Entry>();
  /**
   * sid → the entries of that session, to apply revocations: one entry, or several once its token
   * was re-issued (old and new tokens live side by side until the old one's `exp`).
   */
  private readonly bySid = new Map<string, Entry | Entry[]>();
  /** token → entry queued for the next sync (confirm or renew). */
  private readonly pending = new Map<string, Entry>();
  /** Last revocation sequence number applied; undefined until the first sync. */
  private cursor: number | undefined;
  /** Start of the last successful sync (isolate clock, ms). */
  private lastSyncAt: number | undefined;
  private syncing: Promise<void> | undefined;
  /**
   * Session ids this isolate knows are dead (revoked anywhere, or found expired by a sync): refused
   * before any signature work. Filled only by sync and logout — never by what a caller sends — so a
   * flood of junk tokens cannot evict a logout (measured: 12,000 random tokens evicted the dead
   * entry and the revoked token worked again). At most REVOKED_MEMORY (LRU); a sid evicted from
   * here is refused again by the next sync that meets its token (≤ SESSION_TRUST_MS).
   */
  private readonly revoked = new LRUCache<string, true>({ max: REVOKED_MEMORY });
  /**
   * Legacy (32-hex) tokens Redis has no record of: refused from memory, in their own small LRU, so
   * refusals never take room from live sessions (at most NEGATIVE_MAX).
   */
  private readonly unknownLegacy = new LRUCache<string, true>({ max: NEGATIVE_MAX });
  private syncs = 0;
  private syncFailures = 0;

  private readonly ttlSeconds: number;
  private readonly renewMs: number;
  private readonly syncMs: number;
  private readonly trustMs: number;
  private readonly max: number;
  private readonly legacy: boolean;

  constructor(config: Config) {
    this.keys = new SessionKeys(
      config.SESSION_SECRET,
      config.SESSION_SECRET_PREVIOUS,
      config.SESSION_MAX_AGE_SECONDS,
      config.SESSION_HARD_CAP_SECONDS,
    );
    this.ttlSeconds = config.SESSION_TTL_SECONDS;
    this.renewMs = config.SESSION_RENEW_SECONDS * 1000;
    this.syncMs = config.SESSION_SYNC_MS;
    this.trustMs = config.SESSION_TRUST_MS;
    this.max = config.SESSION_CACHE_MAX;
    this.legacy = config.SESSION_LEGACY_TOKENS;
  }

  /**
   * The user a token names, or null (malformed, forged, revoked, expired). Warm: no Redis call;
   * a sync is started in the background when due. Rejects only when Redis fails on a path that
   * needs it (legacy lookup, or a sync the trust bound makes the request wait for), or with
   * LegacyLookupRefused when `addressOf()` (called only for an unseen legacy token) is past its
   * miss budget.
   */
  async authenticate(deps: Deps, token: string, addressOf?: () => string): Promise<SessionUser | null> {
    let e = this.entries.get(token);
    if (e) {
      this.entries.delete(token);
      this.entries.set(token, e);
    } else {
      const admitted = await this.admit(deps, token, addressOf);
      if (!admitted) return null;
      e = admitted;
    }
    if (!e.user) return null;
    const now = deps.clock.now();
    // Past the token's absolute end: refused, whatever memory or Redis say.
    if (now >= e.expiresAt) return null;
    if (!e.queued && now - e.confirmedAt >= this.renewMs) this.enqueue(token, e);
    if (this.lastSyncAt === undefined || now - this.lastSyncAt >= this.trustMs) {
      // Memory is too old to answer from (cold isolate, or idle/failing past the bound).
      await this.sync(deps);
      return e.user;
    }
    if (!this.syncing && now - this.lastSyncAt >= this.syncMs) deps.waitUntil(this.sync(deps));
    return e.user;
  }

  /**
   * The warm path of `authenticate`, synchronously: the user of a token this isolate already
   * trusts (known, alive, last sync within the trust bound), with the same upkeep side effects
   * (renewal queued when due, background sync started when due). `undefined` means "not answerable
   * from memory right now" — the caller takes `authenticate`'s full path — never "refused".
   */
  peek(deps: Deps, token: string): SessionUser | undefined {
    const e = this.entries.get(token);
    if (!e?.user) return undefined;
    const now = deps.clock.now();
    // Due a re-issue: the full path answers (it adds the fresh token to the response).
    if (
      this.lastSyncAt === undefined ||
      now - this.lastSyncAt >= this.trustMs ||
      now >= e.expiresAt ||
      now >= e.reissueAt
    )
      return undefined;
    this.entries.delete(token);
    this.entries.set(token, e);
    if (!e.queued && now - e.confirmedAt >= this.renewMs) this.enqueue(token, e);
    if (!this.syncing && now - this.lastSyncAt >= this.syncMs) deps.waitUntil(this.sync(deps));
    return e.user;
  }

  /**
   * A session this isolate just opened (login): known good without a confirming round trip, once
   * the isolate follows the revocation stream (before its first sync it is confirmed like any other).
   */
  remember(deps: Deps, token: string, claims: SessionClaims): void {
    const e: Entry = { ...entryOf(claims), confirmedAt: this.cursor === undefined ? -Infinity : deps.clock.now() };
    this.insert(token, e);
    if (e.confirmedAt === -Infinity) this.enqueue(token, e);
  }

  /**
   * A fresh token for the session of `token` (just authenticated by this caller), or:
   *   `undefined` — none due (synchronous: one Map lookup and a comparison, no Redis: the hot path),
   *                 or none possible (the token already ends at the hard cap);
   *   `null`      — the session is gone (its record is missing: logged out, expired, deleted):
   *                 the caller refuses the request.
   * Rejects when Redis fails (the caller serves the request without a fresh token; the next one retries).
   *
   * Costs one command, an EXPIRE of the record with the idle timeout: it confirms the session
   * exists (EXPIRE answers 0 for a missing key, so a session revoked anywhere before it ran is
   * never re-issued) and slides the idle timeout, which the new token then keeps sliding as
   * usual. A revocation that lands after it ends the new token with the old: same sid, same record.
   * Concurrent requests near `exp` may each get their own token; all are equally valid.
   */
  reissue(deps: Deps, token: string): Promise<Reissued | null | undefined> | undefined {
    const e = this.entries.get(token);
    if (!e?.user || deps.clock.now() < e.reissueAt) return undefined;
    const memo = e.reissued;
    if (memo?.entry.user) return Promise.resolve(view(memo.token, memo.entry));
    return this.reissueNow(deps, token, e);
  }

  /** Logout: dead here at once, deleted in Redis and announced to the other isolates (one command). */
  async revoke(deps: Deps, token: string): Promise<void> {
    const e = this.entries.get(token);
    const sid =
      e?.sid ?? (await this.keys.verify(token))?.sid ?? (LEGACY_TOKEN_RE.test(token) ? legacySid(token) : null);
    if (!sid) return;
    await revokeSession(deps.redis, token, sid);
    this.markDead(e, sid);
  }

  /** Runs the upkeep now (or joins the running one). Tests and the trust bound use it; requests use the "if due" path. */
  async sync(deps: Deps): Promise<void> {
    if (!deps.runtime.sharesIo) {
      // workerd: a running sync is another request's and may not be awaited here (src/runtime.ts);
      // this caller runs its own. Two syncs at once are safe: each takes its own batch from
      // `pending`, and cursor and lastSyncAt only move forward (runSync).
      const own: Promise<void> = this.runSync(deps).finally(() => {
        if (this.syncing === own) this.syncing = undefined;
      });
      this.syncing = own;
      return await own;
    }
    this.syncing ??= this.runSync(deps).finally(() => {
      this.syncing = undefined;
    });
    return await this.syncing;
  }

  stats(): SessionCacheStats {
    return {
      entries: this.entries.size,
      pending: this.pending.size,
      syncs: this.syncs,
      syncFailures: this.syncFailures,
      lastSyncAt: this.lastSyncAt ?? null,
    };
  }

  private async reissueNow(deps: Deps, token: string, e: Entry): Promise<Reissued | null | undefined> {
    const user = e.user;
    if (!user || this.revoked.has(e.sid)) return null;
    const startedAt = deps.clock.now();
    const issued = await this.keys.reissue(user, e.sid, e.authTime, startedAt, e.expiresAt);
    if (!issued) {
      // No later `exp` is possible (at the cap): never ask again for this token.
      e.reissueAt = Number.POSITIVE_INFINITY;
      return undefined;
    }
    // The one write. Named by the jti, so it is the record of the new token as well as the old.
    if ((await deps.redis.expire(keys.loginToken(token), this.ttlSeconds)) !== 1) {
      this.markDead(e);
      return null;
    }
    // A logout read meanwhile (here, or by a sync) wins: no fresh token for an ended session.
    if (!e.user || this.revoked.has(e.sid)) return null;
    const confirmedAt = this.cursor === undefined ? -Infinity : startedAt;
    e.confirmedAt = Math.max(e.confirmedAt, confirmedAt);
    const fresh: Entry = { ...entryOf(issued.claims), confirmedAt };
    this.insert(issued.token, fresh);
    if (confirmedAt === -Infinity) this.enqueue(issued.token, fresh);
    e.reissued = { token: issued.token, entry: fresh };
    return view(issued.token, fresh);
  }

  private async admit(deps: Deps, token: string, addressOf: (() => string) | undefined): Promise<Entry | null> {
    const claims = await this.keys.verify(token, deps.clock.now());
    let e: Entry;
    if (claims) {
      if (this.revoked.has(claims.sid)) return null;
      e = { ...entryOf(claims), confirmedAt: -Infinity };
    } else if (this.legacy && LEGACY_TOKEN_RE.test(token)) {
      const sid = legacySid(token);
      if (this.revoked.has(sid) || this.unknownLegacy.has(token)) return null;
      // Unsigned: only Redis knows the user. A missing record is remembered in the negative LRU, so
      // a repeated unknown 32-hex token costs one command per isolate, not one per request; and it
      // counts as a miss of the caller's address, so fresh random ones cost at most the address's
      // miss budget of commands per window (the rest are refused here, before the HMGET).
      const now = deps.clock.now();
      const meter = deps.isolate.missMeter;
      const address = addressOf?.();
      if (address !== undefined) {
        const wait = meter.refusedFor(address, now);
        if (wait > 0) throw new LegacyLookupRefused(wait);
      }
      const user = await readLegacySession(deps.redis, token);
      if (!user) {
        this.unknownLegacy.set(token, true);
        if (address !== undefined) meter.count(address, now);
        return null;
      }
      e = {
        user,
        sid,
        confirmedAt: -Infinity,
        queued: false,
        expiresAt: Number.POSITIVE_INFINITY,
        authTime: 0,
        reissueAt: Number.POSITIVE_INFINITY,
      };
    } else {
      // Not cached: caching refusals would let garbage evict real sessions; refusing costs only CPU.
      return null;
    }
    // A concurrent request may have admitted the same token meanwhile: keep one entry.
    const raced = this.entries.get(token);
    if (raced) return raced;
    this.insert(token, e);
    if (e.user) this.enqueue(token, e);
    return e;
  }

  private insert(token: string, e: Entry): void {
    const old = this.entries.get(token);
    if (old) this.forget(token, old);
    this.entries.set(token, e);
    this.link(e);
    while (this.entries.size > this.max) {
      const oldest = this.entries.keys().next().value as string;
      this.forget(oldest, this.entries.get(oldest) as Entry);
    }
  }

  private forget(token: string, e: Entry): void {
    this.entries.delete(token);
    this.unlink(e);
    this.pending.delete(token);
    e.queued = false;
  }

  private enqueue(token: string, e: Entry): void {
    e.queued = true;
    this.pending.set(token, e);
  }

  private link(e: Entry): void {
    const held = this.bySid.get(e.sid);
    if (held === undefined) this.bySid.set(e.sid, e);
    else if (Array.isArray(held)) held.push(e);
    else if (held !== e) this.bySid.set(e.sid, [held, e]);
  }

  private unlink(e: Entry): void {
    const held = this.bySid.get(e.sid);
    if (held === e) this.bySid.delete(e.sid);
    else if (Array.isArray(held)) {
      const i = held.indexOf(e);
      if (i >= 0) held.splice(i, 1);
      if (held.length === 1) this.bySid.set(e.sid, held[0] as Entry);
      else if (held.length === 0) this.bySid.delete(e.sid);
    }
  }

  /**
   * Dead from now on in this isolate: the sid is remembered apart from the session LRU (held here
   * or not), and every token of the session held here is refused — a re-issued token and the one
   * it replaced share the session, so a logout with either, or a missing record, ends both.
   */
  private markDead(e: Entry | undefined, sid = e?.sid): void {
    if (sid === undefined) return;
    this.revoked.set(sid, true);
    const held = this.bySid.get(sid);
    if (Array.isArray(held)) for (const x of held) kill(x);
    else if (held) kill(held);
    if (e) kill(e);
  }

  private async runSync(deps: Deps): Promise<void> {
    const script = scriptsFor(deps.redis).sessionSync;
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const startedAt = deps.clock.now();
      const batch: [string, Entry][] = [];
      // Taken entries stay `queued` while in flight, so a use meanwhile does not queue them twice.
      for (const [token, e] of this.pending) {
        this.pending.delete(token);
        if (e.user) batch.push([token, e]);
        else e.queued = false;
        if (batch.length >= SYNC_BATCH) break;
      }
      let res: [number, number, number, string[], number[]];
      try {
        res = await script.exec(
          [keys.loginRevoked(), keys.loginRevokedSeq(), ...batch.map(([token]) => keys.loginToken(token))],
          [String(this.cursor ?? -1), String(this.ttlSeconds), String(REVOCATIONS_PER_SYNC)],
        );
      } catch (err) {
        this.syncFailures++;
        // Nothing was learnt: the batch goes back to the queue, and the bound keeps counting from the last success.
        for (const [token, e] of batch) {
          if (this.entries.get(token) === e && e.user) this.enqueue(token, e);
          else e.queued = false;
        }
        throw err;
      }
      this.syncs++;
      const [cursor, truncated, oldest, sids, missing] = res;
      const gone = new Set((missing ?? []).map(Number));
      batch.forEach(([, e], i) => {
        e.queued = false;
        if (gone.has(i + 1)) this.markDead(e);
        else e.confirmedAt = startedAt;
      });
      if (this.cursor !== undefined && Number(oldest) > this.cursor + 1) {
        // The stream was trimmed past our cursor: revocations were missed. Forget everything; each
        // session is verified and confirmed again on its next use.
        for (const [token, e] of [...this.entries]) this.forget(token, e);
      } else {
        // Every revocation, also of sessions this isolate never held: a revoked token first seen
        // here later is refused before its signature is even checked.
        for (const sid of sids ?? []) this.markDead(undefined, String(sid));
      }
      // Monotonic: on workerd two syncs may overlap (see sync), and the later-finishing one may have
      // started earlier; re-reading a revocation is harmless, trusting memory longer is not.
      this.cursor = Math.max(this.cursor ?? -1, Number(cursor));
      this.lastSyncAt = Math.max(this.lastSyncAt ?? Number.NEGATIVE_INFINITY, startedAt);
      if (!truncated && batch.length < SYNC_BATCH) return;
    }
  }
}

/** Refused from memory from now on (a queued entry is dropped by the next sync). */
function kill(e: Entry): void {
  e.user = null;
  e.queued = false;
}

/** An entry's fields from a verified token's claims (not yet confirmed, not queued). */
function entryOf(claims: SessionClaims): Omit<Entry, "confirmedAt"> {
  return {
    user: claims.user,
    sid: claims.sid,
    queued: false,
    expiresAt: claims.expiresAt,
    authTime: claims.authTime,
    reissueAt: claims.reissueAt,
  };
}

function view(token: string, entry: Entry): Reissued {
  return {
    token,
    get live() {
      return entry.user !== null;
    },
  };
}
