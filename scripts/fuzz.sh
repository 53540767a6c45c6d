#!/usr/bin/env bash
# Fuzzes every signature-header parser and the envelope extraction of
# every provider, PayPal's included (the properties in tests/api/signature/fuzz.rs),
# with many more cases than the suite, for a bounded time. A failing input
# is shrunk, reported, and kept by proptest in
# tests/api/proptest-regressions/signature/fuzz.txt, which every later run (the suite
# included) replays first: commit it with the fix.
#
#   scripts/fuzz.sh [SECONDS]     (default 300; no database needed)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

seconds=${1:-300}
[ "$seconds" -ge 1 ] 2>/dev/null || die "SECONDS must be a positive number"
require_cargo
SQLX_OFFLINE=true cargo test --locked --test api --no-run
log "fuzzing for ${seconds}s"
set +e
FUZZ_CASES=${FUZZ_CASES:-100000000} SQLX_OFFLINE=true timeout "$seconds" \
    cargo test --locked --test api -- --test-threads 2 fuzz::
status=$?
set -e
case $status in
    124) log "no failure in ${seconds}s"; exit 0 ;;
    0) log "every case passed"; exit 0 ;;
    *) die "a fuzz property failed (status $status): see above" ;;
esac
