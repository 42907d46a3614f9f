/**
 * `npm run geo:rebuild` — recreates the nearby-search index (`shop:geo:{typeId}`) from tb_shop,
 * e.g. after an import straight into MySQL or a Redis flush. Shop writes through the API keep the
 * index current on their own; this is the repair path. Each type's set is built under a temporary
 * key and renamed over the live one, so searches never see a half-built index.
 */
import { Client } from "@planetscale/database";
import { Redis } from "@upstash/redis";
import { rebuildShopGeo } from "../src/services/shop-geo.ts";
import { loadStackEnv } from "./stack/env-file.ts";

const env = { ...loadStackEnv(), ...process.env };
if (!env.DATABASE_URL || !env.UPSTASH_REDIS_REST_URL || !env.UPSTASH_REDIS_REST_TOKEN) {
  console.error("set DATABASE_URL and UPSTASH_REDIS_REST_URL/TOKEN, or start the local stack (npm run stack)");
  process.exit(1);
}
const started = performance.now();
const total = await rebuildShopGeo(
  new Client({ url: env.DATABASE_URL }),
  new Redis({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN, enableTelemetry: false }),
  (done) => process.stderr.write(`\rindexed ${done} shops`),
);
process.stderr.write("\n");
console.log(JSON.stringify({ indexed: total, seconds: Math.round((performance.now() - started) / 100) / 10 }));
