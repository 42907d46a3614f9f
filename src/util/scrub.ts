/**
 * Dependency error text with the secrets taken out, before it is logged or answered.
 *
 * @upstash/redis puts the whole request into its error message ("…, command was: [[…]]"), and
 * with auto-pipelining that request carries other users' commands: session keys
 * (`login:token:<bearer token>`), login codes, idempotency records. Anything a dependency says
 * about a request is therefore cut at "command was", and what is left is cleaned of anything that
 * looks like a credential: a bearer token (JWT-shaped or a long base64url/hex run), a URL's userinfo
 * (`mysql://user:password@…`), `token=`/`password=`/`secret=` values.
 */
const COMMAND_WAS = /,?\s*command was:[^\n]*/gi;
const JWT = /\b[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b/g;
const LONG_RUN = /[A-Za-z0-9_-]{24,}/g;
const USERINFO = /\/\/[^/\s:@]+:[^/\s@]+@/g;
const NAMED = /\b(token|password|secret|code|authorization|key)(["']?\s*[=:]\s*["']?)[^\s"',&]+/gi;

export function scrub(text: string): string {
  return text
    .replace(COMMAND_WAS, "")
    .replace(USERINFO, "//***@")
    .replace(JWT, "***")
    .replace(NAMED, "$1$2***")
    .replace(LONG_RUN, "***");
}

/** An error's message, scrubbed; for anything else its string form, scrubbed. */
export function scrubbedMessage(err: unknown): string {
  return scrub(err instanceof Error ? err.message : String(err));
}
