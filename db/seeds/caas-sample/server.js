// The demo container app: answers every request with a greeting, its host and the variables'
// names it was given (never their values), on $PORT as the platform asks.
const http = require('node:http');

const port = Number(process.env.PORT);
const server = http.createServer((req, res) => {
  res.setHeader('content-type', 'application/json');
  res.end(
    JSON.stringify({
      greeting: process.env.GREETING ?? 'Hello from a container app',
      host: req.headers.host ?? null,
      path: req.url,
      variables: Object.keys(process.env)
        .filter((k) => /^[A-Z_]+$/.test(k) && !k.startsWith('npm_'))
        .sort(),
    }),
  );
});
server.listen(port, () => console.log(`listening on ${port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
