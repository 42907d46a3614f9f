/**
 * The SMS port: how login codes reach a phone. `dev` logs the code (and keeps the latest per phone
 * in memory so tests and the dev console can read it); `twilio` calls Twilio's Messages API.
 */
import type { Config } from "../env.ts";
import type { Logger } from "../log.ts";

export interface SmsPort {
  /** Delivers `code` to `phone`; rejects when the provider refuses (the caller reports a failure). */
  sendLoginCode(phone: string, code: string): Promise<void>;
}

export class DevSms implements SmsPort {
  /** Latest code per phone, bounded: a dev/test aid, never used for verification. */
  private readonly latest = new Map<string, string>();
  constructor(
    private readonly log: Logger,
    private readonly max = 10_000,
  ) {}

  async sendLoginCode(phone: string, code: string): Promise<void> {
    this.log.info("dev sms: login code", { phone, code });
    this.latest.delete(phone);
    this.latest.set(phone, code);
    if (this.latest.size > this.max) {
      const oldest = this.latest.keys().next().value;
      if (oldest !== undefined) this.latest.delete(oldest);
    }
  }

  lastCode(phone: string): string | undefined {
    return this.latest.get(phone);
  }
}

/** Twilio Messages API: form-encoded POST with basic auth; 201 on success. Mainland numbers get +86. */
export class TwilioSms implements SmsPort {
  constructor(
    private readonly opts: {
      accountSid: string;
      authToken: string;
      from: string;
      apiUrl: string;
      fetch?: typeof fetch;
    },
  ) {}

  async sendLoginCode(phone: string, code: string): Promise<void> {
    const url = `${this.opts.apiUrl.replace(/\/$/, "")}/2010-04-01/Accounts/${encodeURIComponent(this.opts.accountSid)}/Messages.json`;
    const body = new URLSearchParams({
      To: `+86${phone}`,
      From: this.opts.from,
      Body: `【CityHub】验证码 ${code}，2 分钟内有效。`,
    });
    const res = await (this.opts.fetch ?? fetch)(url, {
      method: "POST",
      headers: {
        authorization: `Basic ${btoa(`${this.opts.accountSid}:${this.opts.authToken}`)}`,
        "content-type": "application/x-www-form-urlencoded",
      },
      body,
    });
    if (!res.ok) throw new Error(`twilio: HTTP ${res.status} ${(await res.text()).slice(0, 200)}`);
  }
}

export function createSms(config: Config, log: Logger, fetchImpl?: typeof fetch): SmsPort {
  if (config.SMS_PROVIDER === "twilio") {
    return new TwilioSms({
      accountSid: config.TWILIO_ACCOUNT_SID as string,
      authToken: config.TWILIO_AUTH_TOKEN as string,
      from: config.TWILIO_FROM as string,
      apiUrl: config.TWILIO_API_URL,
      fetch: fetchImpl,
    });
  }
  return new DevSms(log);
}
