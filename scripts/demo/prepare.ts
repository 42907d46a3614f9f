/**
 * The local stack's data, as `npm run dev` and `npm run worker` both want it: migrations applied,
 * then the demo seed on an empty database (shops, users with session tokens in .local/tokens.txt,
 * notes, pictures in the upload store). A database that has shops is left as it is. A stack at a
 * distance is brought near for the setup (thousands of round trips) and put back after it.
 */
import { Client } from "@planetscale/database";
import { Redis } from "@upstash/redis";
import { join } from "node:path";
import { runMigrations } from "../migrate.ts";
import { seed, seedBlobStore } from "../seed.ts";
import { ROOT } from "../stack/env-file.ts";
import type { Stack } from "../stack/index.ts";

export interface PrepareOptions {
  /** false: migrations only (`--no-seed`). */
  seed: boolean;
  shops: number;
  users: number;
  /** Printed when a database already has shops (how to start over). */
  notSeedingHint: string;
  /** Where the demo users' session tokens go (default .local/tokens.txt). */
  tokensFile?: string;
}

export async function prepareDemoData(stack: Stack, opts: PrepareOptions, say: (m: string) => void): Promise<void> {
  const far = stack.distance?.current;
  stack.distance?.set({ oneWayMs: 0 });
  try {
    await prepare(stack, opts, say);
  } finally {
    if (far) stack.distance?.set(far);
  }
}

async function prepare(stack: Stack, opts: PrepareOptions, say: (m: string) => void): Promise<void> {
  const migrated = await runMigrations(stack.env.DATABASE_URL as string, (m) => say(m));
  say(`migrations: ${migrated.applied.length} applied, ${migrated.skipped.length} already applied`);
  const db = new Client({ url: stack.env.DATABASE_URL });
  const count = Number(((await db.execute("SELECT COUNT(*) AS n FROM tb_shop")).rows[0] as { n: string }).n);
  if (count > 0 || !opts.seed) {
    say(`database has ${count} shops; not seeding${opts.notSeedingHint}`);
    return;
  }
  say("empty database: seeding demo data");
  const tokensFile = opts.tokensFile ?? join(ROOT, ".local", "tokens.txt");
  const redis = new Redis({
    url: stack.env.UPSTASH_REDIS_REST_URL as string,
    token: stack.env.UPSTASH_REDIS_REST_TOKEN as string,
    enableTelemetry: false,
  });
  const res = await seed(db, redis, {
    shops: opts.shops,
    users: opts.users,
    notes: 20,
    tokenTtlSeconds: 86400,
    sessionSecret: stack.env.SESSION_SECRET,
    randomSeed: 42,
    tokensFile,
    // Where the app (run with this env, in ROOT) reads uploads: /imgs serves the demo pictures.
    blobs: seedBlobStore({ ...process.env, ...stack.env }),
  });
  say(`seeded ${JSON.stringify(res)} (session tokens of the demo users: ${tokensFile})`);
}
