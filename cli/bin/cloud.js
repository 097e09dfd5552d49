#!/usr/bin/env node
/* global require, process, __dirname */
/* eslint-disable @typescript-eslint/no-require-imports */
'use strict';
// The `cloud` bin: runs the TypeScript entry through tsx (a dependency of this package), so the CLI
// works from a checkout (`npx cloud`) and from `npm i -g` without a build step. The package's own
// tsconfig applies wherever the command is run from (not the one of the current directory).
const path = require('node:path');
process.env.TSX_TSCONFIG_PATH = path.join(__dirname, '..', '..', 'tsconfig.json');
require('tsx/cjs');
require('../main.ts');
