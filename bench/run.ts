/**
 * `npm run bench [-- <name> [args...]]`: runs `bench/<name>.bench.ts` with the given arguments, or,
 * without a name, every `bench/*.bench.ts` in turn with its defaults, then prints every target the
 * benchmarks checked with PASS or FAIL, and the machine's load before and after each. Benchmarks are
 * measurements, not tests: none of them is part of `npm test`. Results go to docs/benchmarks.md by hand.
 */
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { load } from './kit';

const [name, ...args] = process.argv.slice(2);
const benches = name
  ? [`${name.replace(/\.bench\.ts$/, '')}.bench.ts`]
  : readdirSync(__dirname)
      .filter((f) => f.endsWith('.bench.ts'))
      .sort();

function run(file: string): Promise<{ status: number | null; targets: string[] }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(__dirname, file), ...args], {
      cwd: path.resolve(__dirname, '..'),
      stdio: ['inherit', 'pipe', 'inherit'],
    });
    const targets: string[] = [];
    let pending = '';
    child.stdout.on('data', (chunk: Buffer) => {
      process.stdout.write(chunk);
      pending += chunk.toString('utf8');
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) if (/^\s*target .*-> (PASS|FAIL)\s*$/.test(line)) targets.push(line.trim().replace(/^target /, ''));
    });
    child.on('close', (status) => resolve({ status, targets }));
  });
}

async function main() {
  let failed = 0;
  const summary: string[] = [];
  for (const file of benches) {
    const before = load();
    console.log(`\n=== bench/${file} ${args.join(' ')} (load ${before})`);
    const { status, targets } = await run(file);
    if (status !== 0) failed++;
    summary.push(`bench/${file}: load ${before} before, ${load()} after${status !== 0 ? `, exited ${status}` : ''}`);
    for (const t of targets) {
      summary.push(`  ${t}`);
      if (t.endsWith('FAIL')) failed++;
    }
  }
  console.log(`\n=== targets\n${summary.join('\n')}`);
  process.exit(failed > 0 ? 1 : 0);
}

void main();
