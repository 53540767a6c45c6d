#!/usr/bin/env bash
# Outbox drain throughput (rows/s to a local HTTP sink, to RabbitMQ and to
# NATS JetStream, and CPU per row), in release mode. Uses DATABASE_URL when
# set; otherwise a throwaway local Postgres with durability on (fsync,
# synchronous_commit), removed afterwards. Starts RabbitMQ when it is not
# running, as scripts/test.sh does; NATS is WEBHOOKD_BENCH_NATS_URL's
# (default the local server on 4222, with JetStream).
#
#   scripts/bench-drain.sh [ROWS]     (default 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

require_cargo
require_brokers
if [ -z "${DATABASE_URL:-}" ]; then
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/webhookd-bench-pg.XXXXXX")
    chmod 755 "$scratch"
    trap 'stop_cluster; rm -rf "$scratch"' EXIT
    start_cluster "$scratch/data"
fi
SQLX_OFFLINE=true RUST_LOG=${RUST_LOG:-warn} cargo bench --locked --bench drain -- "${1:-20000}"
