/** The in-flight bound (http/slots.ts): refuses past `max` without queueing; a slot never released is taken back after its hold limit. */
import { describe, expect, test } from "bun:test";
import { Slots } from "../../src/http/slots.ts";

describe("Slots", () => {
  test("at most `max` holders; a released slot admits the next", () => {
    const slots = new Slots(2, 60_000);
    const a = slots.tryTake(0);
    const b = slots.tryTake(0);
    expect(a).toBeDefined();
    expect(b).toBeDefined();
    expect(slots.tryTake(0)).toBeUndefined();
    expect(slots.refused).toBe(1);
    slots.release(a as number);
    expect(slots.tryTake(1)).toBeDefined();
    expect(slots.inFlight).toBe(2);
  });

  test("a slot whose holder never released it (a cancelled request) is taken back after maxHoldMs, once and only once", () => {
    const slots = new Slots(1, 1_000);
    const lost = slots.tryTake(0) as number;
    expect(slots.tryTake(1_000)).toBeUndefined();
    const next = slots.tryTake(1_001);
    expect(next).toBeDefined();
    expect(slots.abandoned).toBe(1);
    // The late release of the abandoned ticket does not free the new holder's slot.
    slots.release(lost);
    expect(slots.inFlight).toBe(1);
    expect(slots.tryTake(1_002)).toBeUndefined();
  });
});
