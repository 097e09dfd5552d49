import type { Express, Request, Response } from 'express';
import path from 'node:path';

/**
 * `GET /docs`: the API reference, Swagger UI over the served `/v1/openapi.json`. Its assets come
 * from the swagger-ui-dist package on this server (no CDN); only the files the page loads are served.
 */
const PAGE_DIR = path.join(__dirname, 'reference-page');
const SWAGGER_FILES = new Set(['swagger-ui.css', 'swagger-ui-bundle.js', 'favicon-32x32.png', 'favicon-16x16.png']);
const OWN_FILES = new Set(['reference.js', 'reference.css']);

// Swagger UI sets inline styles and shows data: images; nothing is loaded from elsewhere.
const CSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

function send(res: Response, file: string) {
  res.setHeader('Content-Security-Policy', CSP);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.sendFile(file, { maxAge: '1h' });
}

export function mountReferencePage(app: Express): void {
  // The folder only: requiring the package would load the whole browser bundle into this process.
  const swaggerDir = path.dirname(require.resolve('swagger-ui-dist/package.json'));
  app.get('/docs', (_req: Request, res: Response) => {
    res.setHeader('Cache-Control', 'no-cache');
    send(res, path.join(PAGE_DIR, 'index.html'));
  });
  app.get('/docs/assets/:file', (req: Request, res: Response, next) => {
    const file = String(req.params.file);
    if (!SWAGGER_FILES.has(file)) return next();
    send(res, path.join(swaggerDir, file));
  });
  app.get('/docs/:file', (req: Request, res: Response, next) => {
    const file = String(req.params.file);
    if (!OWN_FILES.has(file)) return next();
    send(res, path.join(PAGE_DIR, file));
  });
}
