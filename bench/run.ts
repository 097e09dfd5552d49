/**
 * `npm run bench [-- <name> [args...]]`: runs `bench/<name>.bench.ts` with the given arguments, or,
 * without a name, every `bench/*.bench.ts` in turn with its defaults. Benchmarks are measurements,
 * not tests: none of them is part of `npm test`. Results go to docs/benchmarks.md by hand.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';

const [name, ...args] = process.argv.slice(2);
const benches = name
  ? [`${name.replace(/\.bench\.ts$/, '')}.bench.ts`]
  : readdirSync(__dirname)
      .filter((f) => f.endsWith('.bench.ts'))
      .sort();

let failed = 0;
for (const file of benches) {
  console.log(`\n=== bench/${file} ${args.join(' ')}`);
  const result = spawnSync(process.execPath, ['--import', 'tsx', path.join(__dirname, file), ...args], {
    cwd: path.resolve(__dirname, '..'),
    stdio: 'inherit',
  });
  if (result.status !== 0) failed++;
}
process.exit(failed > 0 ? 1 : 0);
