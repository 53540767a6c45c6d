#!/usr/bin/env bash
# Builds webhookd, gets it a database, migrates, and serves on
# WEBHOOKD_LISTEN (default 0.0.0.0:8080) until Ctrl-C or SIGTERM; with
# WEBHOOKD_ADMIN_TOKEN set, the console on WEBHOOKD_ADMIN_LISTEN
# (default 127.0.0.1:9090).
#
# Reads ./.env when present. With DATABASE_URL unset, keeps a local Postgres
# cluster in WEBHOOKD_PGDATA (default ./.pgdata; as root, /var/tmp/webhookd-pgdata),
# started now and stopped when webhookd exits; data survives between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

if [ -f .env ]; then
    log "loading .env"
    set -a; . ./.env; set +a
fi

require_cargo
log "building (release)"
SQLX_OFFLINE=true cargo build --locked --release --bin webhookd
binary=${CARGO_TARGET_DIR:-target}/release/webhookd

if [ -z "${DATABASE_URL:-}" ]; then
    if [ "$(id -u)" -eq 0 ]; then default_pgdata=/var/tmp/webhookd-pgdata; else default_pgdata=$PWD/.pgdata; fi
    trap stop_cluster EXIT
    start_cluster "${WEBHOOKD_PGDATA:-$default_pgdata}"
else
    check_database_url
fi

"$binary" migrate

if [ -z "${STRIPE_WEBHOOK_SECRET:-}" ]; then
    log "STRIPE_WEBHOOK_SECRET is not set: /webhooks/stripe will answer 404."
    log "With the Stripe CLI: run 'stripe listen --forward-to localhost:8080/webhooks/stripe',"
    log "then STRIPE_WEBHOOK_SECRET=<the whsec_... it prints> scripts/run.sh"
fi

admin=${WEBHOOKD_ADMIN_LISTEN:-127.0.0.1:9090}
if [ -z "${WEBHOOKD_ADMIN_TOKEN:-}" ]; then
    log "the console is off: WEBHOOKD_ADMIN_TOKEN=\$(openssl rand -hex 32) scripts/run.sh turns it on"
elif [ "$admin" != off ]; then
    log "console: http://$admin/console (log in with WEBHOOKD_ADMIN_TOKEN)"
fi

# Run in the foreground but keep this shell alive to stop the cluster after;
# signals are passed on so webhookd shuts down gracefully.
"$binary" serve &
server=$!
trap 'kill -TERM "$server" 2>/dev/null || true' INT TERM
status=0
wait "$server" || status=$?
# A signal interrupts the first wait; wait again for the graceful exit.
if kill -0 "$server" 2>/dev/null; then wait "$server" || status=$?; fi
exit "$status"
