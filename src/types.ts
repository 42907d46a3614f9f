import type { Deps } from "./deps.ts";
import type { Logger } from "./log.ts";

/** The one Hono environment type: every handler sees the same capabilities in `c.var`. */
export type AppEnv = {
  Variables: {
    deps: Deps;
    requestId: string;
    log: Logger;
  };
};
