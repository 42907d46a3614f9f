/**
 * Fixed, memorable ports for the developer's stack (tests always use free random ports). When one
 * is taken (another checkout's stack, a system redis on 6379…) we fall back to a free port and say
 * so, instead of failing; the real ports always land in .local/stack.env.
 */
import { createServer } from "node:net";
import { freePort } from "./engines.ts";

export const DEV_PORTS = { redis: 6390, mysql: 3390, rest: 8079, planetscale: 8078, qstash: 8080, app: 8787 } as const;

async function isFree(port: number): Promise<boolean> {
  return await new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => resolve(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)));
  });
}

/** Shard i's (1-based) preferred ports: redis-server 6390+i, its Upstash-REST stand-in 8090+i. */
export const SHARD_PORT_BASE = { redis: 6390, rest: 8090 } as const;

/** The developer's ports (DEV_PORTS, or a free one where taken); `preferred: false`: all free ports (tests). */
export async function pickPorts(
  log: (m: string) => void,
  preferred = true,
): Promise<Record<keyof typeof DEV_PORTS, number>> {
  const out = {} as Record<keyof typeof DEV_PORTS, number>;
  for (const [name, port] of Object.entries(DEV_PORTS) as [keyof typeof DEV_PORTS, number][]) {
    if (!preferred) out[name] = await freePort();
    else if (await isFree(port)) out[name] = port;
    else {
      out[name] = await freePort();
      log(`port ${port} (${name}) is busy; using ${out[name]}`);
    }
  }
  return out;
}

/** Ports for `n` seckill shards, by the same rule as pickPorts (preferred, else a free one). */
export async function pickShardPorts(
  n: number,
  log: (m: string) => void,
  preferred = true,
): Promise<{ redis: number[]; rest: number[] }> {
  const out = { redis: [] as number[], rest: [] as number[] };
  for (let i = 1; i <= n; i++) {
    for (const kind of ["redis", "rest"] as const) {
      const port = SHARD_PORT_BASE[kind] + i;
      if (!preferred) out[kind].push(await freePort());
      else if (await isFree(port)) out[kind].push(port);
      else {
        const free = await freePort();
        out[kind].push(free);
        log(`port ${port} (shard ${i} ${kind}) is busy; using ${free}`);
      }
    }
  }
  return out;
}
