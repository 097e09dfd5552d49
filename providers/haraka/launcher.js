/* global require, process */
/* eslint-disable @typescript-eslint/no-require-imports */
'use strict';
// Foreground launcher of Haraka 3.3.4 for providers/haraka/haraka.server.ts:
//   node --import tsx launcher.js -c <dataDir>
// (CommonJS, as the package is: a .cjs name would fall outside eslint.config.mjs's rules for
// plain JavaScript.)
// Haraka installs its graceful-stop handler for SIGINT always but for SIGTERM only as pid 1 (in a
// container); run as an ordinary daemon, SIGTERM would kill it without its shutdown (listeners
// closed, outbound queue stopped, plugins' shutdown() called: our hooks' close()).
//
// SIGTERM goes straight to the server's graceful stop, not through Haraka's SIGINT handler: that
// handler renames the process (process.title), which overwrites its command line, and the manager
// recognises its server by that command line (a pidfile's pid may be reused). A renamed process
// would look gone while it still holds the submission port.
let stopping = false;
process.on('SIGTERM', () => {
  if (stopping) process.exit(1);
  stopping = true;
  const logger = require('Haraka/logger');
  logger.notice('SIGTERM received');
  logger.dump_and_exit(() => require('Haraka/server').performShutdown());
});
// Nagle's algorithm off on every socket Haraka opens (it never asks for it itself): it sends an SMTP
// reply such as `354`, and the final `.` of a delivery, as small writes of their own, and with Nagle
// on each waited about 40 ms for the peer's delayed ACK. That stall set every submission to ~55 ms
// and every delivery's last step to ~43 ms (docs/benchmarks.md, "Mail gateway"). Haraka's plain
// and TLS sockets are both made through these two functions (its tls_socket.js).
const net = require('node:net');
const createServer = net.createServer;
net.createServer = function (...args) {
  const server = createServer.apply(this, args);
  server.on('connection', (socket) => socket.setNoDelay(true));
  return server;
};
const connect = net.connect;
net.connect = net.createConnection = function (...args) {
  const socket = connect.apply(this, args);
  socket.setNoDelay(true);
  return socket;
};

require('Haraka/bin/haraka');
