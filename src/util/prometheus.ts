/**
 * The Prometheus text exposition format (version 0.0.4), written directly: one `# HELP` and one
 * `# TYPE` line per family, then one sample line per label set. Every figure /metrics exposes is
 * already held as a snapshot (guards, counters summed in Redis, the sale's state) and read at
 * scrape time, so nothing here keeps state: a family is built, rendered and dropped per scrape.
 * Escaping follows the format: `\` and newline in HELP; `\`, `"` and newline in label values.
 * Values are finite numbers, NaN or ±Inf (written as the format spells them). docs/decisions/metrics.md
 * says why this is not prom-client.
 */

export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export type MetricType = "counter" | "gauge";
export type Labels = Record<string, string | number>;

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

export interface Family {
  name: string;
  help: string;
  type: MetricType;
  samples: { labels: Labels; value: number }[];
}

/** A family to fill with `add`; counters' names end in `_total` (the format's convention). */
export function family(name: string, type: MetricType, help: string): Family & { add(v: number, l?: Labels): void } {
  if (!NAME.test(name)) throw new Error(`invalid metric name ${name}`);
  const samples: Family["samples"] = [];
  return {
    name,
    help,
    type,
    samples,
    add(value: number, labels: Labels = {}) {
      samples.push({ labels, value });
    },
  };
}

const escapeHelp = (s: string) => s.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
const escapeLabel = (s: string) => s.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");

function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Number.POSITIVE_INFINITY) return "+Inf";
  if (v === Number.NEGATIVE_INFINITY) return "-Inf";
  return String(v);
}

function formatLabels(labels: Labels): string {
  const entries = Object.entries(labels);
  if (entries.length === 0) return "";
  const parts = entries.map(([k, v]) => {
    if (!LABEL.test(k) || k.startsWith("__")) throw new Error(`invalid label name ${k}`);
    return `${k}="${escapeLabel(String(v))}"`;
  });
  return `{${parts.join(",")}}`;
}

/** The exposition of `families`, in the order given; a family without samples is still declared. */
export function render(families: readonly Family[]): string {
  const out: string[] = [];
  for (const f of families) {
    out.push(`# HELP ${f.name} ${escapeHelp(f.help)}`, `# TYPE ${f.name} ${f.type}`);
    for (const s of f.samples) out.push(`${f.name}${formatLabels(s.labels)} ${formatValue(s.value)}`);
  }
  return `${out.join("\n")}\n`;
}
