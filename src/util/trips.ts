/**
 * Dependency trips per request, for the `Server-Timing` header. Every guarded call (src/resilience.ts
 * `Guard.run`: one HTTP request to Redis, PlanetScale, QStash, SMS or payments) records itself in
 * the `RequestTrips` of the async context it was made in (`tripScope`, entered by the edge for each
 * routed request). An AsyncLocalStorage rather than a field of the request's deps: the isolate's own
 * clients (rate limiters, the session store, caches) reach the ports without the request's deps,
 * and on workerd requests run concurrently in one isolate, so a "current request" variable would mix them.
 *
 * Sequential trips (`sequential`): the longest chain of calls each started after the previous one
 * answered — a call's depth is 1 + the deepest call already answered when it started. Calls made
 * together (Promise.all, one pipeline) share a depth. Only calls answered before the response is
 * written count; those still in flight then (background work) are reported apart. On Bun and Deno
 * Redis auto-pipelining may carry two requests' commands in one trip: it is counted for the
 * request that sent it (the counts are exact for one request at a time, and on workerd).
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { DependencyName } from "../resilience.ts";

/** Header names per dependency (`mysql` is the database: `db`). */
const LABELS: Record<DependencyName, string> = {
  redis: "redis",
  mysql: "db",
  qstash: "qstash",
  sms: "sms",
  payments: "payments",
};
const ORDER: readonly DependencyName[] = ["redis", "mysql", "qstash", "sms", "payments"];

/** The header of a response that made no trip (a memory answer). */
export const NO_TRIPS = 'trips;desc="0 in sequence"';

export interface DependencyTrips {
  /** HTTP requests answered (or failed). */
  trips: number;
  /** Redis commands carried by them (a pipeline carries several); equal to `trips` elsewhere. */
  commands: number;
  /** Their summed duration, ms. */
  ms: number;
}

export class RequestTrips {
  /** Per dependency; absent until its first call. */
  readonly by: Partial<Record<DependencyName, DependencyTrips>> = {};
  /** Depth of the deepest answered call (see the file comment). */
  private deepest = 0;
  /** Calls started and not yet answered. */
  inFlight = 0;

  /** A call starts: its depth, handed back to `end`. */
  begin(): number {
    this.inFlight++;
    return this.deepest + 1;
  }

  end(dep: DependencyName, depth: number, ms: number, commands: number): void {
    this.inFlight--;
    if (depth > this.deepest) this.deepest = depth;
    const d = (this.by[dep] ??= { trips: 0, commands: 0, ms: 0 });
    d.trips++;
    d.commands += commands;
    d.ms += ms;
  }

  /** Sequential trips on the critical path so far. */
  get sequential(): number {
    return this.deepest;
  }

  /** `redis;desc="2 trips, 3 commands";dur=41.2, db;desc="1 trip";dur=20.3, trips;desc="3 in sequence"`. */
  header(): string {
    if (this.deepest === 0 && this.inFlight === 0) return NO_TRIPS;
    let out = "";
    for (const dep of ORDER) {
      const d = this.by[dep];
      if (!d) continue;
      const more = dep === "redis" && d.commands !== d.trips ? `, ${d.commands} commands` : "";
      out += `${LABELS[dep]};desc="${d.trips} trip${d.trips === 1 ? "" : "s"}${more}";dur=${d.ms.toFixed(1)}, `;
    }
    out += `trips;desc="${this.deepest} in sequence"`;
    if (this.inFlight > 0) out += `, background;desc="${this.inFlight} in flight"`;
    return out;
  }
}

/** The routed request's trips; stores nothing itself (each request's store lives in its async context). */
export const tripScope = new AsyncLocalStorage<RequestTrips>();
