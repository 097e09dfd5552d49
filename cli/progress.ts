import type { Operation } from '../client/operations';

/**
 * Progress of a waited operation on stderr. On a terminal: one bar redrawn in place
 * (`[#####-----] 50%  running  vps.reinstall op_…  12s`), a moving block while the progress is
 * unknown. Elsewhere (a log, CI): one plain line per change of status or progress.
 */
export interface ProgressStream {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export class ProgressReporter {
  private readonly startedAt = Date.now();
  private lastKey = '';
  private last: Operation | null = null;
  private tick = 0;
  private timer: NodeJS.Timeout | null = null;
  private drawn = false;

  constructor(
    private readonly stream: ProgressStream,
    private readonly id: string,
  ) {
    // Redraw each second on a terminal so the elapsed time and the moving block keep going between polls.
    if (stream.isTTY) this.timer = setInterval(() => this.draw(), 1000).unref();
  }

  update(op: Operation): void {
    this.last = op;
    if (this.stream.isTTY) return this.draw();
    const key = `${op.status}|${op.progress ?? ''}`;
    if (key === this.lastKey) return;
    this.lastKey = key;
    const progress = op.progress === null || op.progress === undefined ? '' : ` ${op.progress}%`;
    this.stream.write(`${op.id} ${op.type} ${op.status}${progress}${op.stale ? ' (stale)' : ''}\n`);
  }

  /** Ends the bar with a final line. */
  finish(note?: string): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.stream.isTTY) {
      this.draw();
      this.stream.write('\n');
    }
    if (note) this.stream.write(`${note}\n`);
  }

  private draw(): void {
    const op = this.last;
    const width = Math.max(40, (this.stream.columns || 80) - 1);
    const elapsed = `${Math.round((Date.now() - this.startedAt) / 1000)}s`;
    const barWidth = Math.min(30, Math.max(10, width - 50));
    let bar: string;
    let percent: string;
    if (op && typeof op.progress === 'number') {
      const filled = Math.round((Math.min(100, Math.max(0, op.progress)) / 100) * barWidth);
      bar = '█'.repeat(filled) + '░'.repeat(barWidth - filled);
      percent = `${String(op.progress).padStart(3)}%`;
    } else {
      const pos = this.tick++ % barWidth;
      bar = '░'.repeat(pos) + '█' + '░'.repeat(barWidth - pos - 1);
      percent = '   …';
    }
    if (op && op.status === 'succeeded') bar = '█'.repeat(barWidth);
    const status = op ? `${op.status}${op.stale ? ' (stale)' : ''}` : 'waiting';
    const text = `[${bar}] ${percent}  ${status}  ${op?.type ?? ''} ${this.id}  ${elapsed}`;
    this.stream.write(`\r\x1b[2K${text.length > width ? text.slice(0, width) : text}`);
    this.drawn = true;
  }

  get hasDrawn(): boolean {
    return this.drawn;
  }
}
