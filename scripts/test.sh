#!/usr/bin/env bash
# Runs every check and test. Uses DATABASE_URL when it is set; otherwise
# starts a throwaway Postgres cluster on a free port and removes it after.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

require_cargo
require_browser
require_brokers
# The whole suite runs part of itself through PgBouncer too, and the tests
# that start a PgBouncer of their own fail, rather than skip, without it.
if [ "$#" -eq 0 ]; then
    require_pgbouncer
    export WEBHOOKD_POOLER_TESTS=required
fi
# The tests run a second time through PgBouncer (below), chosen by path in
# tests/api: the ingest transaction, its batches and a database not ready;
# Stripe's effects; the outbox and its drainers; the binary in pooler
# mode; the console's outbox page; and any other test of batches by name.
# A pattern that selects no test, or a selection smaller than
# POOLED_AT_LEAST, fails the run: a rename cannot quietly drop them.
POOLED=(
    '^ingest::(transaction|batch|batch_mixed|unavailable)::'
    '^effects::stripe::'
    '^drain::'
    '^pooler::transaction::'
    '^console::outbox::'
    '::[^:]*batch[^:]*$'
)
POOLED_AT_LEAST=79
# pooled_tests: prints the full names of the tests POOLED selects, one a
# line, or fails saying which pattern selects nothing or how many are left.
pooled_tests() {
    local all selected count pattern
    all=$(cargo test --locked --test api -- --list --format terse | sed -n 's/: test$//p')
    for pattern in "${POOLED[@]}"; do
        grep -qE -- "$pattern" <<<"$all" || die "no test in tests/api matches the pooled pattern $pattern"
    done
    selected=$(grep -E "${POOLED[@]/#/-e}" <<<"$all" | sort -u)
    count=$(grep -c . <<<"$selected")
    [ "$count" -ge "$POOLED_AT_LEAST" ] \
        || die "the pooled patterns select $count tests, fewer than POOLED_AT_LEAST ($POOLED_AT_LEAST)"
    printf '%s\n' "$selected"
}

# The console's browser test fails, rather than skips, without Chromium.
export WEBHOOKD_BROWSER_TESTS=required
export SQLX_OFFLINE=true   # queries are checked against the committed .sqlx data
export RUST_BACKTRACE=${RUST_BACKTRACE:-0}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/webhookd-test-pg.XXXXXX")
chmod 755 "$scratch"
trap 'stop_pgbouncer; stop_cluster; rm -rf "$scratch"' EXIT
if [ -n "${DATABASE_URL:-}" ]; then
    check_database_url
    log "testing against DATABASE_URL"
else
    # A scratch cluster: durability is not what these tests measure.
    start_cluster "$scratch/data" fsync=off synchronous_commit=off full_page_writes=off max_connections=200
fi

log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
cargo clippy --locked --all-targets -- -D warnings
log "alerting rules (promtool)"
bash scripts/check-alerts.sh
if [ "$#" -eq 0 ]; then
    log "the tests to run again through PgBouncer"
    pooled=$(pooled_tests)
    log "$(grep -c . <<<"$pooled") tests to run again through PgBouncer"
fi
log "cargo test"
cargo test --locked -- "$@"
# Skipped when the tests were filtered: the ingest, batch, Stripe, outbox,
# drain and pooler tests again, with the code under test (the app, its
# batches, the drainers) on PgBouncer in transaction mode, handing each
# transaction to the next server connection (the tests' own checks read the
# database directly); then the short chaos run (one crash,
# one database outage, lost webhooks and a sweep) on the binary the tests
# just built, against a cluster of its own: directly, on PgBouncer without
# a direct URL, and on PgBouncer with one.
if [ "$#" -eq 0 ]; then
    log "cargo test, through PgBouncer in transaction mode: ingest, batches, Stripe, outbox, drain, pooler"
    # Idle server connections close after 1 s, so that each test's
    # database can be dropped after it.
    start_pgbouncer "$scratch/pgbouncer" "$DATABASE_URL" 20 1
    # Word splitting is wanted: one test name a word.
    # shellcheck disable=SC2086
    WEBHOOKD_TEST_POOLER_URL=$PGBOUNCER_URL cargo test --locked --test api -- --exact $pooled
    stop_pgbouncer
    for mode in "" --pooler --pooler-direct; do
        log "chaos (short) ${mode:-direct}"
        WEBHOOKD_BIN=${CARGO_TARGET_DIR:-target}/debug/webhookd bash scripts/chaos.sh --short $mode
    done
fi
