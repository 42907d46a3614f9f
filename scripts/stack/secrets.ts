/** The dev stack's operator secret: random once per checkout, kept in .local/ so it survives restarts. */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { LOCAL_DIR } from "./env-file.ts";

export function localAdminToken(): string {
  const file = join(LOCAL_DIR, "admin-token");
  if (existsSync(file)) {
    const t = readFileSync(file, "utf8").trim();
    if (t.length >= 16) return t;
  }
  mkdirSync(LOCAL_DIR, { recursive: true });
  const token = `adm_${[...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  return token;
}
