/**
 * How long the suite takes, against its targets (docs/benchmarks.md "Test suite"): the full `npm test`
 * under 4 minutes on the 2-core reference machine, and `npm run test:unit` under 20 s. Runs `npm test`
 * once, timing its phases by the `== ` lines scripts/test.sh prints (setup, then the tests with the checks beside them), then
 * reads the run's vitest report (.data/vitest-report.json) for the slowest files, then runs
 * `npm run test:unit`. A measurement, not a test; it takes the whole machine for 3 to 5 minutes.
 *
 *   npx tsx bench/suite.bench.ts              # both
 *   npx tsx bench/suite.bench.ts --unit-only  # only npm run test:unit
 *   npx tsx bench/suite.bench.ts --tests-only # npm test's tests phase alone (its vitest command), for
 *                                             # a tree whose typecheck or lint fails for other reasons
 *   TEST_WORKERS=4 npx tsx bench/suite.bench.ts   # with another worker count (vitest.config.mts)
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { load, verdict } from './kit';

const root = path.resolve(__dirname, '..');
const FULL_TARGET_S = 240;
const UNIT_TARGET_S = 20;

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

interface Timed {
  status: number | null;
  totalMs: number;
  /** Each `== <phase>` line of scripts/test.sh with the time it appeared, from the start. */
  marks: Array<{ phase: string; atMs: number }>;
  tail: string[];
}

/** Runs an npm script with the output shown as it comes, noting when each phase line appears. */
function timed(command: string, args: string[]): Promise<Timed> {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(command, args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], env: process.env });
    const marks: Timed['marks'] = [];
    const tail: string[] = [];
    let pending = '';
    child.stdout.on('data', (chunk: Buffer) => {
      process.stdout.write(chunk);
      pending += chunk.toString('utf8');
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) {
        // Phase lines only ("== typecheck, lint, format", "== tests ..."), not the checks' verdicts.
        const phase = /^== (typecheck, lint, format|tests)\b/.exec(line);
        if (phase) marks.push({ phase: phase[1], atMs: Date.now() - started });
        tail.push(line);
        if (tail.length > 5) tail.shift();
      }
    });
    child.on('close', (status) => resolve({ status, totalMs: Date.now() - started, marks, tail }));
  });
}

function phases(run: Timed): Array<[string, number]> {
  const bounds = [{ phase: 'setup (ensure-tools, Node check)', atMs: 0 }, ...run.marks, { phase: 'end', atMs: run.totalMs }];
  return bounds.slice(0, -1).map((b, i) => [b.phase, bounds[i + 1].atMs - b.atMs]);
}

const REPORT = path.join(root, '.data/vitest-report.json');

/** The slowest files of the run's vitest report (written after `since`). */
function report(since: number): string[] {
  const file = REPORT;
  if (!existsSync(file) || statSync(file).mtimeMs < since) return ['  (no vitest report from this run: the tests did not run)'];
  const r = JSON.parse(readFileSync(file, 'utf8')) as {
    numPassedTests: number;
    numFailedTests: number;
    testResults: Array<{ name: string; startTime: number; endTime: number }>;
  };
  const files = r.testResults.map((f) => ({ name: path.relative(root, f.name), ms: f.endTime - f.startTime })).sort((a, b) => b.ms - a.ms);
  return [
    `  ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${files.length} files; slowest (their tests, hooks not counted):`,
    ...files.slice(0, 8).map((f) => `    ${seconds(f.ms).padStart(8)}  ${f.name}`),
  ];
}

async function main() {
  const unitOnly = process.argv.includes('--unit-only');
  const testsOnly = process.argv.includes('--tests-only');
  const lines: string[] = [];
  let failed = false;
  if (!unitOnly) {
    const before = load();
    const since = Date.now();
    // scripts/test.sh's vitest command, as its tests phase runs it.
    const vitest = ['node_modules/.bin/vitest', 'run', '--reporter=default', '--reporter=json', `--outputFile.json=${REPORT}`];
    const full = testsOnly ? await timed(vitest[0], vitest.slice(1)) : await timed('npm', ['test']);
    const what = testsOnly ? "npm test's tests phase" : 'npm test';
    lines.push(`${what}: exit ${full.status}, load ${before} before, ${load()} after`);
    if (!testsOnly) for (const [phase, ms] of phases(full)) lines.push(`  ${phase.padEnd(34)} ${seconds(ms)}`);
    lines.push(...report(since));
    const ok = full.status === 0 && full.totalMs < FULL_TARGET_S * 1000;
    failed ||= !ok;
    lines.push(`  target ${what} < ${FULL_TARGET_S} s and green: ${seconds(full.totalMs)}, exit ${full.status} -> ${verdict(ok)}`);
  }
  const before = load();
  const unit = await timed('npm', ['run', 'test:unit']);
  const ok = unit.status === 0 && unit.totalMs < UNIT_TARGET_S * 1000;
  failed ||= !ok;
  lines.push(`npm run test:unit: exit ${unit.status}, load ${before} before, ${load()} after`);
  lines.push(`  target npm run test:unit < ${UNIT_TARGET_S} s and green: ${seconds(unit.totalMs)}, exit ${unit.status} -> ${verdict(ok)}`);
  console.log(`\n=== suite (${os.cpus().length} cores, TEST_WORKERS=${process.env.TEST_WORKERS ?? '3 (default)'})\n${lines.join('\n')}`);
  process.exit(failed ? 1 : 0);
}

void main();
