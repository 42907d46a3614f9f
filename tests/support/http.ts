/** Small request helpers for in-process app tests (Hono `app.request`). */
import type { Hono } from "hono";
import type { AppEnv } from "../../src/types.ts";
import type { DevSms } from "../../src/sms/index.ts";
import type { Deps } from "../../src/deps.ts";

export interface Envelope<T = unknown> {
  success: boolean;
  errorMsg?: string;
  code?: string;
  data?: T;
  total?: number;
  requestId?: string;
}

export async function call<T = unknown>(
  app: Hono<AppEnv>,
  method: string,
  path: string,
  opts: { token?: string; json?: unknown; body?: BodyInit; headers?: Record<string, string>; ip?: string } = {},
): Promise<{ status: number; body: Envelope<T>; headers: Headers }> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.token) headers.authorization = opts.token;
  let body = opts.body;
  if (opts.json !== undefined) {
    headers["content-type"] = "application/json";
    body = JSON.stringify(opts.json);
  }
  const res = await app.request(path, { method, headers, body }, { clientIp: opts.ip ?? "10.0.0.1" });
  const text = await res.text();
  let parsed: Envelope<T>;
  try {
    parsed = JSON.parse(text) as Envelope<T>;
  } catch {
    throw new Error(`${method} ${path} → ${res.status}, not JSON: ${text.slice(0, 200)}`);
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

/** A phone number no other test uses (mainland format). */
export function uniquePhone(): string {
  return `139${String(Math.floor(Math.random() * 1e8)).padStart(8, "0")}`;
}

/** Requests a code and logs in through the real routes; returns the session token. */
export async function loginAs(
  app: Hono<AppEnv>,
  deps: Deps,
  phone = uniquePhone(),
): Promise<{ token: string; phone: string }> {
  const ip = `10.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}`;
  const sent = await call(app, "POST", `/api/user/code?phone=${phone}`, { ip });
  if (sent.status !== 200 || !sent.body.success) throw new Error(`code send failed: ${JSON.stringify(sent.body)}`);
  const code = (deps.sms as DevSms).lastCode(phone);
  const res = await call<string>(app, "POST", "/api/user/login", { json: { phone, code } });
  if (!res.body.success || !res.body.data) throw new Error(`login failed: ${JSON.stringify(res.body)}`);
  return { token: res.body.data, phone };
}
