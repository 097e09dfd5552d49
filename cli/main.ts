import { CommanderError } from 'commander';
import { NetworkError } from '../client/api-client';
import { buildProgram, CliExit, EXIT, UsageError } from './program';
import { PromptCancelled } from './prompt';
import { loadClientRoutes } from './route-manifest';

/** The `cloud` process: parse, run, and map every way of ending to the documented exit code. */
async function main(argv: string[]): Promise<number> {
  const program = buildProgram(loadClientRoutes());
  try {
    await program.parseAsync(argv, { from: 'user' });
    return EXIT.ok;
  } catch (err) {
    if (err instanceof CliExit) return err.code;
    if (err instanceof CommanderError) {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return EXIT.ok;
      // A group called without a subcommand prints its help as an error: a usage error too.
      return EXIT.usage;
    }
    if (err instanceof UsageError) {
      process.stderr.write(`usage error: ${err.message}\n`);
      return EXIT.usage;
    }
    if (err instanceof PromptCancelled) return 130;
    if (err instanceof NetworkError) {
      process.stderr.write(`network_error/${err.causeCode}: ${err.message}\n`);
      return EXIT.apiError;
    }
    process.stderr.write(`internal error of the CLI: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    return EXIT.apiError;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    // Let stdout drain before leaving (a large JSON body into a pipe).
    process.exitCode = code;
    if (process.stdout.writableLength === 0) process.exit(code);
    else process.stdout.once('drain', () => process.exit(code));
  },
  (err) => {
    process.stderr.write(`${err}\n`);
    process.exit(EXIT.apiError);
  },
);
