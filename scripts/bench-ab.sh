#!/usr/bin/env bash
# Ingest of two builds, A and B, in one run: RUNS rounds, each drilling A
# then B (`webhookd drill`, EVENTS unique Stripe credits at 32 senders over
# 1,000 wallets, each build against a new database of its own, served by
# its own binary with the drainer and the log sink), so that the machine's
# drift falls on both. Prints one markdown table and the ratio of the
# means, B over A. Uses DATABASE_URL's server (scratch databases created
# and dropped), else a throwaway cluster. Exits 1 when a drill's books do
# not add up.
#
#   scripts/bench-ab.sh A_BINARY B_BINARY [RUNS] [EVENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

[ "$#" -ge 2 ] || die "usage: scripts/bench-ab.sh A_BINARY B_BINARY [RUNS] [EVENTS]"
a=$1 b=$2 runs=${3:-3} events=${4:-20000}
for bin in "$a" "$b"; do [ -x "$bin" ] || die "$bin is not an executable"; done
command -v python3 >/dev/null || die "python3 is needed (the drill's JSON)"

WEBHOOKD_BIN=$a bench_setup webhookd_bench_ab
secret=whsec_bench_ab
BENCH_EXTRA_DBS="webhookd_bench_ab_run"
# drill BINARY: writes the unique credits a second of one drill on a new
# database to $scratch/rate, or fails when its books do not add up. (In
# this shell, not a subshell: the cleanup stops its server.)
drill() {
    local binary=$1 url out
    url=$(bench_database webhookd_bench_ab_run)
    start_webhookd "$binary" "$url" "$secret" "$scratch/serve.log" WEBHOOKD_ROLE=all
    out=$(DATABASE_URL=$url "$binary" drill --events "$events" --concurrency 32 --users 1000 \
        --url "$WEBHOOKD_URL" --stripe-webhook-secret "$secret" 2>/dev/null | tail -1)
    kill -TERM "$WEBHOOKD_PID"; wait "$WEBHOOKD_PID" || true; WEBHOOKD_PID=
    python3 -c 'import json, sys
d = json.loads(sys.argv[1])
if not d.get("passed"):
    sys.exit("the drill did not pass: " + sys.argv[1])
print(round(d["unique_events_per_sec"]))' "$out" > "$scratch/rate"
}

echo "| run | A, credits/s | B, credits/s |"
echo "|---|---|---|"
sum_a=0 sum_b=0
for run in $(seq 1 "$runs"); do
    drill "$a"
    rate_a=$(cat "$scratch/rate")
    drill "$b"
    rate_b=$(cat "$scratch/rate")
    sum_a=$((sum_a + rate_a)) sum_b=$((sum_b + rate_b))
    printf '| %s | %s | %s |\n' "$run" "$rate_a" "$rate_b"
done
python3 -c 'import sys; a, b, n = map(int, sys.argv[1:]); print(f"means: A {a / n:,.0f}, B {b / n:,.0f}: B/A {b / a:.2f}x")' "$sum_a" "$sum_b" "$runs"
