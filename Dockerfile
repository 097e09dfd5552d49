# The control plane's one image. The command picks the process (docs/deployment.md):
#   api      (default) tsx api/server.ts      - the HTTP API on $PORT (3000)
#   worker             tsx workers/main.ts    - the Temporal worker and the loops beside it
#   migrate [down]     tsx scripts/migrate.ts - knex migrations, one-shot
#   anything else      run as given (e.g. `node -e ...`)
# The sources run under tsx (its loader, in the node process itself: signals reach the process that
# handles them, and SIGTERM drains the audit log / shuts the worker down cleanly).

ARG NODE_IMAGE=node:24-slim

# --- 1. production dependencies, from the lockfile ------------------------------------------------
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
ENV npm_config_update_notifier=false \
    npm_config_fund=false \
    npm_config_audit=false
COPY package.json package-lock.json ./
# tsx and typescript are runtime dependencies; test and lint tooling is left out.
RUN npm ci --omit=dev --loglevel=error && npm cache clean --force

# --- 2. runtime -----------------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    LOG_LEVEL=info \
    PATH=/app/node_modules/.bin:$PATH
WORKDIR /app
# Code and dependencies stay owned by root: the process (user `node`, uid 1000) can read, not change them.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json package-lock.json tsconfig.json ./
COPY common ./common
COPY db ./db
COPY domain ./domain
COPY infra ./infra
COPY client ./client
COPY mcp ./mcp
COPY providers ./providers
COPY dataplane ./dataplane
COPY api ./api
COPY activities ./activities
COPY families ./families
COPY workflows ./workflows
COPY workers ./workers
COPY scripts/migrate.ts ./scripts/migrate.ts

USER node
EXPOSE 3000
ENTRYPOINT ["/bin/sh", "-c", "cmd=\"${1:-api}\"; [ $# -gt 0 ] && shift; case \"$cmd\" in api) exec node --import tsx api/server.ts ;; worker) exec node --import tsx workers/main.ts ;; images) exec node --initial-old-space-size=128 --import tsx dataplane/images/main.ts ;; mail) exec node --import tsx dataplane/mail/main.ts ;; migrate) exec node --import tsx scripts/migrate.ts \"$@\" ;; *) exec \"$cmd\" \"$@\" ;; esac", "cloud"]
CMD ["api"]
