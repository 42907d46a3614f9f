/**
 * The replication link of a read region: a TCP relay between a replica redis-server
 * (`replicaof` the relay) and its primary, so tests can make replication lag for real. `hold()`
 * stops passing the primary's bytes (the replication stream) to the replica — they queue in this
 * process — while the replica keeps serving reads of what it has; `release()` lets them through in
 * order. Nothing is dropped or reordered: a held link is a slow network, not a broken one.
 * Bytes from the replica to the primary (REPLCONF ACK) always pass.
 */
import { connect, createServer, type Server, type Socket } from "node:net";

export interface ReplicationLink {
  /** Where the replica connects (`replicaof host port`). */
  host: string;
  port: number;
  /** Whether the primary → replica direction is held now. */
  readonly held: boolean;
  /** Bytes from the primary waiting for `release()`. */
  readonly queuedBytes: number;
  hold(): void;
  release(): void;
  stop(): Promise<void>;
}

export async function startReplicationLink(primary: { host: string; port: number }): Promise<ReplicationLink> {
  let held = false;
  const pairs = new Set<{ down: Socket; up: Socket; queue: Buffer[] }>();
  const flush = (p: { down: Socket; queue: Buffer[] }) => {
    for (const b of p.queue.splice(0)) p.down.write(b);
  };
  const server: Server = createServer((down) => {
    const up = connect(primary.port, primary.host);
    const pair = { down, up, queue: [] as Buffer[] };
    pairs.add(pair);
    up.on("data", (b: Buffer) => {
      if (held) pair.queue.push(b);
      else down.write(b);
    });
    down.on("data", (b: Buffer) => up.write(b));
    const close = () => {
      pairs.delete(pair);
      up.destroy();
      down.destroy();
    };
    up.on("error", close);
    down.on("error", close);
    up.on("close", close);
    down.on("close", close);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const addr = server.address();
  if (addr === null || typeof addr === "string") throw new Error("replication link: no port");
  return {
    host: "127.0.0.1",
    port: addr.port,
    get held() {
      return held;
    },
    get queuedBytes() {
      let n = 0;
      for (const p of pairs) for (const b of p.queue) n += b.length;
      return n;
    },
    hold() {
      held = true;
    },
    release() {
      held = false;
      for (const p of pairs) flush(p);
    },
    stop: async () => {
      for (const p of pairs) {
        p.up.destroy();
        p.down.destroy();
      }
      pairs.clear();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
