/**
 * A counting semaphore without a queue: at most `max` holders at once, and one more is refused
 * at once (the caller answers 503 + Retry-After) rather than waiting — a wait would hold its
 * request, body and socket anyway. Per isolate (a plain counter: no I/O, so any runtime's
 * requests may share it). Every successful `tryTake` must be paired with one `release`.
 */
export class Slots {
  /** Holders now (0..max). */
  inFlight = 0;
  /** Takers refused because all slots were held, since the isolate started. */
  refused = 0;

  constructor(readonly max: number) {}

  tryTake(): boolean {
    if (this.inFlight >= this.max) {
      this.refused++;
      return false;
    }
    this.inFlight++;
    return true;
  }

  release(): void {
    if (this.inFlight > 0) this.inFlight--;
  }
}
