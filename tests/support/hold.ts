/**
 * Holds calls to one method of a port until the test releases them: the way to freeze a request
 * at a known point (say, inside the provider's charge) and look at what concurrent requests do
 * meanwhile — deterministic, where a delay would only be likely. The held call then runs for real.
 *
 *   const hold = new Hold();
 *   const t = await serveTestApp(env, { wrap: (deps) => ({ ...deps, payments: hold.wrap(deps.payments, "charge") }) });
 *   … await eventually("one charge held", async () => hold.held === 1); hold.release();
 */
export class Hold {
  /** Calls that reached the held method (held or, after release, passed through). */
  held = 0;
  private released = false;
  private waiters: (() => void)[] = [];

  /** Lets every held call, and every later one, proceed. */
  release(): void {
    this.released = true;
    for (const w of this.waiters.splice(0)) w();
  }

  wrap<T extends object>(port: T, method: keyof T & string): T {
    const hold = this;
    return new Proxy(port, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (prop !== method || typeof value !== "function") return value;
        return async function (this: unknown, ...args: unknown[]) {
          hold.held++;
          if (!hold.released) await new Promise<void>((r) => hold.waiters.push(r));
          return await Reflect.apply(value, this, args);
        };
      },
    });
  }
}
