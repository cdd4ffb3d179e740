/**
 * Progress of long runs on stderr: a line rewritten in place on a terminal, an occasional line
 * otherwise (logs, pipes), nothing when quiet.
 *
 * @module
 */

const encoder = new TextEncoder();

function isTerminal(): boolean {
  try {
    return Deno.stderr.isTerminal();
  } catch {
    return false;
  }
}

/** Writes a line to stderr. */
export function note(text: string): void {
  Deno.stderr.writeSync(encoder.encode(text + "\n"));
}

/** Reports `done / total` of a named task, at most a few times a second on a terminal. */
export class Progress {
  #label: string;
  #quiet: boolean;
  #terminal = isTerminal();
  #start = performance.now();
  #last = -Infinity;
  #shown = false;

  /** Starts reporting the task `label` (nothing is printed when `quiet`). */
  constructor(label: string, quiet = false) {
    this.#label = label;
    this.#quiet = quiet;
  }

  /**
   * Records progress; prints when enough time has passed since the last report. A first report of 0
   * done restarts the clock (the task begins then).
   */
  update(done: number, total: number): void {
    const now = performance.now();
    if (done === 0 && !this.#shown) this.#start = now;
    if (this.#quiet) return;
    const every = this.#terminal ? 200 : 5000;
    if (now - this.#last < every && done < total) return;
    if (!this.#shown && now - this.#start < 1000) return; // short tasks stay silent
    this.#last = now;
    const pct = total > 0 ? Math.floor(100 * done / total) : 100;
    const text = `${this.#label}: ${pct}% (${done}/${total}), ${((now - this.#start) / 1000).toFixed(1)} s`;
    Deno.stderr.writeSync(encoder.encode(this.#terminal ? `\r\x1b[2K${text}` : `${text}\n`));
    this.#shown = true;
  }

  /** Ends the task's line; returns the seconds it took. */
  finish(): number {
    const seconds = (performance.now() - this.#start) / 1000;
    if (this.#shown && this.#terminal && !this.#quiet) Deno.stderr.writeSync(encoder.encode("\n"));
    return seconds;
  }
}
