/**
 * Headless Chromium for the browser tests: Debian's `chromium` package (scripts/setup.mjs installs
 * it for `npm test`), driven by `playwright-core`, which never downloads a browser of its own.
 * CHROMIUM_PATH overrides the binary found on PATH.
 *
 * The page under test may reach the app under test only: every request is recorded (see
 * `watchPage`), and the browser resolves no host name (`--host-resolver-rules`), so a stray URL
 * fails at once instead of leaving the machine. Chromium's own background traffic is off.
 */
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";

export function chromiumPath(): string {
  const path = process.env.CHROMIUM_PATH || Bun.which("chromium") || Bun.which("chromium-browser");
  if (!path) {
    throw new Error(
      "no chromium on PATH: `node scripts/setup.mjs --browser` installs it (or: sudo apt-get install -y chromium); CHROMIUM_PATH names another binary",
    );
  }
  return path;
}

export async function launchChromium(): Promise<Browser> {
  return await chromium.launch({
    executablePath: chromiumPath(),
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-quic",
      "--no-first-run",
      "--disable-component-update",
      "--disable-sync",
      // Only the app's address resolves (the test servers listen on 127.0.0.1); any other host fails at once.
      "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    ],
  });
}

export interface PageWatch {
  /** Every URL the pages of the context requested, in order. */
  requests: string[];
  /** Console errors, uncaught exceptions and CSP violations, as text. */
  problems: string[];
  /** Requests whose origin is not `origin` (data: and blob: URLs stay in the page). */
  offOrigin(): string[];
  /**
   * Announces an error status the test provokes on purpose (a 400 page for a bad form, a 401 for a
   * wrong token): Chromium logs it as `Failed to load resource`, and the next such log of this
   * status for this path is then not a problem.
   */
  expectStatus(status: number, path: string): void;
}

/**
 * Records what the context's pages do: requests, console errors, page errors, and CSP violations
 * (reported through a `securitypolicyviolation` listener installed in every document before its
 * own scripts run).
 */
export async function watchPage(context: BrowserContext, origin: string): Promise<PageWatch> {
  const requests: string[] = [];
  const problems: string[] = [];
  const expected: string[] = [];
  await context.addInitScript(() => {
    document.addEventListener("securitypolicyviolation", (e) => {
      console.error(
        `CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "(inline)"} in ${e.sourceFile || document.URL}`,
      );
    });
  });
  context.on("request", (r) => {
    requests.push(r.url());
  });
  const onPage = (page: Page) => {
    page.on("console", (m) => {
      if (m.type() !== "error") return;
      const status = /^Failed to load resource: the server responded with a status of (\d{3})/.exec(m.text())?.[1];
      const url = m.location().url;
      const i = status === undefined || !url ? -1 : expected.indexOf(`${status} ${new URL(url).pathname}`);
      if (i >= 0) expected.splice(i, 1);
      else problems.push(`console.error: ${m.text()} (${url})`);
    });
    page.on("pageerror", (err) => {
      problems.push(`uncaught: ${err.message}`);
    });
  };
  context.on("page", onPage);
  return {
    requests,
    problems,
    offOrigin: () =>
      requests.filter((u) => {
        const url = new URL(u);
        return url.protocol !== "data:" && url.protocol !== "blob:" && url.origin !== origin;
      }),
    expectStatus: (status, path) => {
      expected.push(`${status} ${path}`);
    },
  };
}
