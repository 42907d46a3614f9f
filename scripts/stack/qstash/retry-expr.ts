/**
 * Upstash-Retry-Delay: a tiny arithmetic language in milliseconds over the variable `retried`
 * (0 before the first retry), e.g. `pow(2, retried) * 1000`. Compiled once at publish time, to
 * refuse a bad expression with a 400 there, and again for each retry of the stored text.
 *
 * Pure: no I/O and no HTTP; a bad expression throws RetryExprError and the caller maps it.
 */

/** Delay in ms before the next attempt, given how many retries already happened. */
export type RetryDelayFn = (retried: number) => number;

export class RetryExprError extends Error {}

const MAX_SOURCE_LENGTH = 500;
const MAX_DEPTH = 50;

/** The functions the hosted API documents (features/retry), with their arities. */
const FUNCS: Record<string, { min: number; max: number; fn: (...a: number[]) => number }> = {
  pow: { min: 2, max: 2, fn: (a, b) => (a ?? NaN) ** (b ?? NaN) },
  sqrt: { min: 1, max: 1, fn: (a) => Math.sqrt(a ?? NaN) },
  abs: { min: 1, max: 1, fn: (a) => Math.abs(a ?? NaN) },
  exp: { min: 1, max: 1, fn: (a) => Math.exp(a ?? NaN) },
  floor: { min: 1, max: 1, fn: (a) => Math.floor(a ?? NaN) },
  ceil: { min: 1, max: 1, fn: (a) => Math.ceil(a ?? NaN) },
  round: { min: 1, max: 1, fn: (a) => Math.round(a ?? NaN) },
  min: { min: 1, max: 64, fn: (...a) => Math.min(...a) },
  max: { min: 1, max: 64, fn: (...a) => Math.max(...a) },
};

/**
 * Recursive-descent parser for `+ - * /`, unary minus, parentheses, numbers, the variable
 * `retried` and the functions above. Never uses eval; input length and nesting are bounded.
 */
export function compileRetryDelay(src: string): RetryDelayFn {
  if (src.length > MAX_SOURCE_LENGTH) throw new RetryExprError("retry delay expression too long");
  const toks = (src.match(/\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[A-Za-z_]\w*|[-+*/(),]|\S)/g) ?? []).map((t) => t.trim());
  let i = 0;
  let depth = 0;
  const fail = (msg: string): never => {
    throw new RetryExprError(`invalid retry delay expression (${msg}): ${src}`);
  };
  const peek = (): string | undefined => toks[i];
  const expect = (t: string) => (toks[i] === t ? i++ : fail(`expected '${t}'`));

  const expr = (): RetryDelayFn => {
    if (++depth > MAX_DEPTH) fail("too deeply nested");
    let left = term();
    for (let op = peek(); op === "+" || op === "-"; op = peek()) {
      i++;
      const l = left;
      const r = term();
      left = op === "+" ? (x) => l(x) + r(x) : (x) => l(x) - r(x);
    }
    depth--;
    return left;
  };
  const term = (): RetryDelayFn => {
    let left = unary();
    for (let op = peek(); op === "*" || op === "/"; op = peek()) {
      i++;
      const l = left;
      const r = unary();
      left = op === "*" ? (x) => l(x) * r(x) : (x) => l(x) / r(x);
    }
    return left;
  };
  const unary = (): RetryDelayFn => {
    const t = peek();
    if (t === "-" || t === "+") {
      i++;
      if (++depth > MAX_DEPTH) fail("too deeply nested");
      const inner = unary();
      depth--;
      return t === "-" ? (x) => -inner(x) : inner;
    }
    return primary();
  };
  const primary = (): RetryDelayFn => {
    const t = peek();
    if (t === undefined) return fail("unexpected end");
    i++;
    if (/^\d/.test(t)) {
      const n = Number(t);
      return () => n;
    }
    if (t === "(") {
      const e = expr();
      expect(")");
      return e;
    }
    if (t === "retried") return (x) => x;
    const f = FUNCS[t];
    if (f) {
      expect("(");
      const args: RetryDelayFn[] = [expr()];
      while (peek() === ",") {
        i++;
        args.push(expr());
      }
      expect(")");
      if (args.length < f.min || args.length > f.max) fail(`${t} takes ${f.min}..${f.max} arguments`);
      return (x) => f.fn(...args.map((a) => a(x)));
    }
    return fail(`unexpected '${t}'`);
  };

  const e = expr();
  if (i !== toks.length) fail(`unexpected '${toks[i]}'`);
  return e;
}
