/**
 * The script registry: every Lua file is imported as text here, once, and run through
 * `createScript(src).exec(keys, args)` — EVALSHA first, EVAL on NOSCRIPT (after a Redis restart or
 * SCRIPT FLUSH), so the common path sends only the 40-byte hash.
 */
import type { Redis } from "@upstash/redis";
import ackOutboxSrc from "../../lua/ack-outbox.lua" with { type: "text" };
import claimOutboxSrc from "../../lua/claim-outbox.lua" with { type: "text" };
import blogLikeToggleSrc from "../../lua/blog-like-toggle.lua" with { type: "text" };
import cacheFillSrc from "../../lua/cache-fill.lua" with { type: "text" };
import cacheProbeSrc from "../../lua/cache-probe.lua" with { type: "text" };
import extendLockSrc from "../../lua/extend-lock.lua" with { type: "text" };
import idBlockSrc from "../../lua/id-block.lua" with { type: "text" };
import idempotencyClaimSrc from "../../lua/idempotency-claim.lua" with { type: "text" };
import idempotencyFinishSrc from "../../lua/idempotency-finish.lua" with { type: "text" };
import listingSyncSrc from "../../lua/listing-sync.lua" with { type: "text" };
import loginCodeConsumeSrc from "../../lua/login-code-consume.lua" with { type: "text" };
import loginCodeMissSrc from "../../lua/login-code-miss.lua" with { type: "text" };
import releaseStockSrc from "../../lua/release-stock.lua" with { type: "text" };
import releaseStockManySrc from "../../lua/release-stock-many.lua" with { type: "text" };
import reconcileBuyersSrc from "../../lua/reconcile-buyers.lua" with { type: "text" };
import reloadSeckillSrc from "../../lua/reload-seckill.lua" with { type: "text" };
import markReleasedSrc from "../../lua/mark-released.lua" with { type: "text" };
import reserveFenceSrc from "../../lua/reserve-fence.lua" with { type: "text" };
import reserveStockSrc from "../../lua/reserve-stock.lua" with { type: "text" };
import seckillMoveInSrc from "../../lua/seckill-move-in.lua" with { type: "text" };
import seckillMoveOutSrc from "../../lua/seckill-move-out.lua" with { type: "text" };
import seckillAdmissionSrc from "../../lua/seckill-admission.lua" with { type: "text" };
import uploadQuotaSrc from "../../lua/upload-quota.lua" with { type: "text" };
import resetStockSrc from "../../lua/reset-stock.lua" with { type: "text" };
import saleCountsSrc from "../../lua/sale-counts.lua" with { type: "text" };
import sessionRevokeSrc from "../../lua/session-revoke.lua" with { type: "text" };
import sessionSyncSrc from "../../lua/session-sync.lua" with { type: "text" };
import unlockSrc from "../../lua/unlock.lua" with { type: "text" };

/** Sources by name; tests assert each is real Lua (not the path string Bun yields without the loader). */
export const luaSources = {
  unlock: unlockSrc,
  extendLock: extendLockSrc,
  idBlock: idBlockSrc,
  loginCodeMiss: loginCodeMissSrc,
  loginCodeConsume: loginCodeConsumeSrc,
  blogLikeToggle: blogLikeToggleSrc,
  cacheProbe: cacheProbeSrc,
  cacheFill: cacheFillSrc,
  reserveStock: reserveStockSrc,
  reserveFence: reserveFenceSrc,
  seckillMoveOut: seckillMoveOutSrc,
  seckillMoveIn: seckillMoveInSrc,
  markReleased: markReleasedSrc,
  releaseStock: releaseStockSrc,
  resetStock: resetStockSrc,
  claimOutbox: claimOutboxSrc,
  ackOutbox: ackOutboxSrc,
  releaseStockMany: releaseStockManySrc,
  reconcileBuyers: reconcileBuyersSrc,
  reloadSeckill: reloadSeckillSrc,
  sessionSync: sessionSyncSrc,
  sessionRevoke: sessionRevokeSrc,
  idempotencyClaim: idempotencyClaimSrc,
  idempotencyFinish: idempotencyFinishSrc,
  listingSync: listingSyncSrc,
  seckillAdmission: seckillAdmissionSrc,
  uploadQuota: uploadQuotaSrc,
  saleCounts: saleCountsSrc,
} as const;

export type ScriptName = keyof typeof luaSources;

export type Scripts = ReturnType<typeof createScripts>;

/**
 * Script handles per Redis client. Not isolate memory in the sense of deps.isolate (no state a
 * request could observe: a handle holds its source and SHA-1): they are keyed by the client they
 * run on because a handle is bound to one client — and a test's fault-injection wrapper around the
 * client must see the EVALSHA its handles send.
 */
const perClient = new WeakMap<Redis, Scripts>();

/** Script handles for a client, built once per client (createScript caches the SHA-1). */
export function scriptsFor(redis: Redis): Scripts {
  let s = perClient.get(redis);
  if (!s) {
    s = createScripts(redis);
    perClient.set(redis, s);
  }
  return s;
}

export function createScripts(redis: Redis) {
  return {
    unlock: redis.createScript<number>(luaSources.unlock),
    extendLock: redis.createScript<number>(luaSources.extendLock),
    idBlock: redis.createScript<number>(luaSources.idBlock),
    loginCodeMiss: redis.createScript<number>(luaSources.loginCodeMiss),
    loginCodeConsume: redis.createScript<number>(luaSources.loginCodeConsume),
    /** {delta, count, version}: see lua/blog-like-toggle.lua. */
    blogLikeToggle: redis.createScript<[number, number, number]>(luaSources.blogLikeToggle),
    /** {code, a, b}: see lua/reserve-stock.lua. */
    /** {code, entry | known}: see lua/cache-probe.lua. */
    cacheProbe: redis.createScript<[number, unknown?]>(luaSources.cacheProbe),
    /** 1 when the caller's rebuild lock was released: see lua/cache-fill.lua. */
    cacheFill: redis.createScript<number>(luaSources.cacheFill),
    reserveStock: redis.createScript<[number, number, number]>(luaSources.reserveStock),
    reserveFence: redis.createScript<number>(luaSources.reserveFence),
    /** {taken, left}: see lua/seckill-move-out.lua. */
    seckillMoveOut: redis.createScript<[number, number]>(luaSources.seckillMoveOut),
    /** 1 applied, 0 before, -1 not loaded: see lua/seckill-move-in.lua. */
    seckillMoveIn: redis.createScript<number>(luaSources.seckillMoveIn),
    markReleased: redis.createScript<number>(luaSources.markReleased),
    releaseStock: redis.createScript<number>(luaSources.releaseStock),
    /** {before, after, changed} summed stock: see lua/reset-stock.lua. */
    resetStock: redis.createScript<[number, number, number]>(luaSources.resetStock),
    /** Claimed reservations' payloads (JSON text, or already-parsed objects from the SDK). */
    claimOutbox: redis.createScript<unknown[]>(luaSources.claimOutbox),
    /** Outbox entries removed. */
    ackOutbox: redis.createScript<number>(luaSources.ackOutbox),
    /** Orders released now. */
    releaseStockMany: redis.createScript<number>(luaSources.releaseStockMany),
    /** {readded, stock, buyers}: see lua/reconcile-buyers.lua. */
    reconcileBuyers: redis.createScript<[number, number, number]>(luaSources.reconcileBuyers),
    /** {loaded, stock, buyers}: see lua/reload-seckill.lua. */
    reloadSeckill: redis.createScript<[number, number, number]>(luaSources.reloadSeckill),
    /** {cursor, truncated, oldest, sids, missing}: see lua/session-sync.lua. */
    sessionSync: redis.createScript<[number, number, number, string[], number[]]>(luaSources.sessionSync),
    /** The revocation's sequence number: see lua/session-revoke.lua. */
    sessionRevoke: redis.createScript<number>(luaSources.sessionRevoke),
    /** {1} claimed, {0, record, pttl ms} taken, or {2, retry-after ms} over the caller's hourly quota: see lua/idempotency-claim.lua. */
    idempotencyClaim: redis.createScript<[number, (string | number)?, number?]>(luaSources.idempotencyClaim),
    /** 1 when the claim was still ours: see lua/idempotency-finish.lua. */
    idempotencyFinish: redis.createScript<number>(luaSources.idempotencyFinish),
    /** {cur, prev} per address: see lua/listing-sync.lua. */
    listingSync: redis.createScript<number[]>(luaSources.listingSync),
    /** {granted, left}: see lua/seckill-admission.lua. */
    seckillAdmission: redis.createScript<[number, number]>(luaSources.seckillAdmission),
    /** {ok (1/0), used bytes}: see lua/upload-quota.lua. */
    uploadQuota: redis.createScript<[number, number]>(luaSources.uploadQuota),
    /** Increments applied: see lua/sale-counts.lua. */
    saleCounts: redis.createScript<number>(luaSources.saleCounts),
  };
}
