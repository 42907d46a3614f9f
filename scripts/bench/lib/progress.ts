/**
 * Progress on stderr (stdout carries only the final table, so it can be piped): a cli-progress bar
 * on a terminal, one plain line per step otherwise (CI logs, pipes).
 */
import cliProgress from "cli-progress";

export class Progress {
  private readonly multi: cliProgress.MultiBar | null;
  private readonly bar: cliProgress.SingleBar | null;
  private done = 0;
  /** After stop() (end of run, or Ctrl-C while loops still wind down) nothing more is printed. */
  private stopped = false;
  /** Planned seconds of the steps finished so far, for a steady "time left" (cli-progress' ETA is rate-based and jumpy here). */
  private doneS = 0;
  private currentS = 0;

  constructor(
    private readonly total: number,
    private readonly plannedS: number,
  ) {
    if (process.stderr.isTTY) {
      this.multi = new cliProgress.MultiBar(
        {
          stream: process.stderr,
          format: " bench {bar} {value}/{total} steps | ~{left} s left | {step}",
          barsize: 24,
          hideCursor: true,
          clearOnComplete: true,
          etaBuffer: 4,
        },
        cliProgress.Presets.shades_classic,
      );
      this.bar = this.multi.create(total, 0, { step: "starting", left: Math.ceil(plannedS) });
    } else {
      this.multi = null;
      this.bar = null;
    }
  }

  /** A step (warm-up or measured window) of about `seconds` starts. */
  start(step: string, seconds: number): void {
    if (this.stopped) return;
    this.currentS = seconds;
    const left = Math.max(0, Math.ceil(this.plannedS - this.doneS));
    if (this.bar) this.bar.update(this.done, { step, left });
    else process.stderr.write(`[bench ${this.done + 1}/${this.total}] ${step}\n`);
  }

  /** The current step finished; `summary` is logged above the bar. */
  finish(summary?: string): void {
    if (this.stopped) return;
    this.done++;
    this.doneS += this.currentS;
    if (summary) this.log(summary);
    this.bar?.update(this.done);
  }

  log(message: string): void {
    if (this.stopped) return;
    if (this.multi) this.multi.log(`${message}\n`);
    else process.stderr.write(`${message}\n`);
  }

  stop(): void {
    // MultiBar prints logged lines only on its next redraw, and stop() does not redraw: force
    // one so the last round's summary is not lost. (update() is public in JS, untyped in TS.)
    (this.multi as unknown as { update?: () => void } | null)?.update?.();
    this.multi?.stop();
    this.stopped = true;
  }
}
