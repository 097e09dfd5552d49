#!/usr/bin/env node
/* global require, process, __dirname, __filename */
/* eslint-disable @typescript-eslint/no-require-imports */
'use strict';
// The `cloud` bin: runs the TypeScript entry through tsx (a dependency of this package), so the CLI
// works from a checkout (`npx cloud`) and from `npm i -g` without a build step. The package's own
// tsconfig applies wherever the command is run from (not the one of the current directory).
const path = require('node:path');
const fs = require('node:fs');
// Each command is a new process: Node keeps the compiled modules (in the system's temp directory)
// for the next one, which then starts in about half the time.
require('node:module').enableCompileCache?.();

const REQUIRED_MAJOR = 24;
const root = path.join(__dirname, '..', '..');

// The project runs on Node 24 (README "Requirements"). A shell whose `node` is older (Debian 12's is
// 20) still runs `cloud`: the bin starts again on the Node 24 that the `node` devDependency puts in
// node_modules/.bin, with the same arguments, terminal and exit status. Without that binary it goes
// on with the Node it was given.
const major = Number(process.versions.node.split('.')[0]);
const node24 = path.join(root, 'node_modules', '.bin', 'node');
if (major < REQUIRED_MAJOR && !process.env.CLOUD_BIN_REEXEC && fs.existsSync(node24)) {
  const { spawn } = require('node:child_process');
  const child = spawn(node24, [__filename, ...process.argv.slice(2)], {
    stdio: 'inherit',
    env: { ...process.env, CLOUD_BIN_REEXEC: '1' },
  });
  // Ctrl-C reaches both processes (one process group): the child decides what it means.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => child.kill(signal));
  child.on('error', (err) => {
    process.stderr.write(`cloud: could not start ${node24}: ${err.message}\n`);
    process.exit(1);
  });
  child.on('exit', (code, signal) => {
    if (signal) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    } else process.exit(code ?? 1);
  });
} else {
  delete process.env.CLOUD_BIN_REEXEC;
  process.env.TSX_TSCONFIG_PATH = path.join(root, 'tsconfig.json');
  require('tsx/cjs');
  require('../main.ts');
}
