/**
 * Dependency error text is scrubbed before it is logged or answered (src/util/scrub.ts): the
 * Upstash SDK quotes the whole request — other users' session keys with it — in its errors.
 */
import { expect, test } from "bun:test";
import { createLogger } from "../src/log.ts";
import { DependencyUnavailableError } from "../src/resilience.ts";
import { scrub } from "../src/util/scrub.ts";

const TOKEN = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI0MiIsImp0aSI6ImFiYyJ9.c2lnbmF0dXJlc2lnbmF0dXJlc2ln";
const LEGACY = "9b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e";
const upstash = `Command failed: ERR wrong number of arguments, command was: [["hmget","login:token:${TOKEN}","id"],["get","login:code:13900000000"],["exists","login:token:${LEGACY}"]]`;

test("the Upstash 'command was' part and anything token-shaped is cut; the reason stays", () => {
  const out = scrub(upstash);
  expect(out).toBe("Command failed: ERR wrong number of arguments");
  expect(scrub(`rejected ${TOKEN} and ${LEGACY}`)).toBe("rejected *** and ***");
  expect(scrub("connect to mysql://app:s3cr3t-pw@db.example/app failed")).toBe(
    "connect to mysql://***@db.example/app failed",
  );
  expect(scrub("token=abc123&x=1")).toBe("token=***&x=1");
  expect(scrub("redis unavailable (timed out)")).toBe("redis unavailable (timed out)");
});

test("a dependency failure's message (answered to clients as 503) and the logs carry no token", () => {
  const err = new DependencyUnavailableError("redis", "failed", 1000, new Error(upstash));
  expect(err.message).not.toContain(TOKEN);
  expect(err.message).not.toContain("login:code");
  const lines: string[] = [];
  const original = console.error;
  console.error = (line: string) => void lines.push(line);
  try {
    createLogger("warn").error("request failed", { err: new Error(upstash, { cause: new Error(`inner ${LEGACY}`) }) });
  } finally {
    console.error = original;
  }
  expect(lines.length).toBe(1);
  expect(lines[0]).not.toContain(TOKEN);
  expect(lines[0]).not.toContain(LEGACY);
  expect(lines[0]).toContain("Command failed: ERR wrong number of arguments");
});
