#!/usr/bin/env bash
# Throughput as the tables grow: unique events/s at 32 concurrent senders
# on empty tables, then again, on the same running server, after 5 million
# retained events (and their 5 million ledger entries) were added and the
# tables analysed. Durability stays on. Uses DATABASE_URL's server when set
# (a scratch database is created and dropped), else a throwaway local cluster.
# Then the bytes each retained event takes, and what `webhookd prune` (the
# row-by-row retention) takes to remove them and leaves behind.
#
#   scripts/bench-growth.sh [EVENTS_PER_RUN] [RETAINED]   (defaults 20000 5000000)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

events=${1:-20000}
retained=${2:-5000000}
[ "$events" -ge 20 ] 2>/dev/null || die "EVENTS_PER_RUN must be a number of at least 20"
[ "$retained" -ge 0 ] 2>/dev/null || die "RETAINED must be a number"
require_cargo
command -v python3 >/dev/null || die "python3 is needed to read the drill's JSON"

bench_setup webhookd_growth max_connections=200 shared_buffers=256MB max_wal_size=4GB
secret=whsec_bench
start_webhookd "$binary" "$db_url" "$secret" "$scratch/server.log"

drill() {
    DATABASE_URL=$db_url STRIPE_WEBHOOK_SECRET=$secret "$binary" drill --url "$WEBHOOKD_URL" \
        --events "$events" --concurrency 32 || true
}
log "drill on empty tables: $events unique events, concurrency 32"
empty=$(drill)

log "adding $retained retained events and ledger entries"
started=$(date +%s)
"$PG_BINDIR/psql" -q -v ON_ERROR_STOP=1 -d "$db_url" <<SQL
-- Rows shaped like the ones webhookd writes for a credit, older than any new one.
insert into wallets (user_id, currency, balance_minor)
select 'retained_' || u, 'USD', 0 from generate_series(0, 9999) u;
insert into processed_events
    (provider, event_id, event_type, outcome, detail, payload, provider_created_at, received_at)
select 'stripe', 'evt_retained_' || i, 'payment_intent.succeeded', 'processed',
       jsonb_build_object('entry_id', i, 'balance_minor', 150, 'outbox_id', i, 'applied_deferred', '[]'::jsonb),
       jsonb_build_object('id', 'evt_retained_' || i, 'object', 'event', 'type', 'payment_intent.succeeded',
           'created', 1700000000 + i, 'livemode', false,
           'data', jsonb_build_object('object', jsonb_build_object(
               'id', 'pi_retained_' || i, 'object', 'payment_intent', 'amount', 150,
               'amount_received', 150, 'currency', 'usd', 'status', 'succeeded',
               'metadata', jsonb_build_object('user_id', 'retained_' || (i % 10000))))),
       to_timestamp(1700000000 + i), to_timestamp(1700000000 + i)
from generate_series(1, $retained) i;
insert into wallet_entries (user_id, currency, amount_minor, kind, provider, source_ref, event_id, created_at)
select 'retained_' || (i % 10000), 'USD', 150, 'credit', 'stripe', 'pi_retained_' || i, 'evt_retained_' || i,
       to_timestamp(1700000000 + i)
from generate_series(1, $retained) i;
update wallets w set balance_minor = s.total
from (select user_id, currency, sum(amount_minor)::bigint as total from wallet_entries group by 1, 2) s
where w.user_id = s.user_id and w.currency = s.currency;
vacuum analyze;
SQL
filled_in=$(( $(date +%s) - started ))

log "drill with $retained retained events: $events unique events, concurrency 32"
grown=$(drill)

# What a retained event costs on disk, and what today's retention (row-by-row
# deletes in batches) takes to remove the retained events and leaves behind.
sizes() {
    "$PG_BINDIR/psql" -qAt -F ' ' -d "$db_url" -c "select pg_relation_size('processed_events'),
        pg_indexes_size('processed_events'), (select count(*) from processed_events),
        (select n_dead_tup from pg_stat_user_tables where relname = 'processed_events')"
}
read -r heap_before index_before rows_before _ <<<"$(sizes)"
log "pruning the retained events with webhookd prune (row by row, batches of 5000)"
prune_started=$(date +%s%N)
pruned=$(DATABASE_URL=$db_url "$binary" prune --older-than 30d)
prune_ms=$(( ($(date +%s%N) - prune_started) / 1000000 ))
"$PG_BINDIR/psql" -q -d "$db_url" -c "select pg_stat_force_next_flush()" >/dev/null 2>&1 || true
sleep 1   # the statistics collector's counts of dead tuples
read -r heap_after index_after rows_after dead_after <<<"$(sizes)"

python3 - "$retained" "$filled_in" "$empty" "$grown" "$heap_before" "$index_before" "$rows_before" \
    "$prune_ms" "$pruned" "$heap_after" "$index_after" "$rows_after" "$dead_after" <<'PY'
import json, sys
retained, filled_in = int(sys.argv[1]), int(sys.argv[2])
empty, grown = json.loads(sys.argv[3]), json.loads(sys.argv[4])
heap, index, rows = (int(v) for v in sys.argv[5:8])
prune_secs, pruned = int(sys.argv[8]) / 1000, sys.argv[9]
heap_after, index_after, rows_after, dead_after = (int(v or 0) for v in sys.argv[10:14])
print("| tables | unique events/s | p50 ms | p99 ms | verified |")
print("|---|---|---|---|---|")
for name, d in (("empty", empty), (f"{retained:,} retained events", grown)):
    l = d["latency_ms"]
    print(f"| {name} | {d['unique_events_per_sec']:,.0f} | {l['p50']:.2f} | {l['p99']:.2f} | {d['passed']} |")
ratio = grown["unique_events_per_sec"] / empty["unique_events_per_sec"]
print()
print(f"Ratio with {retained:,} retained events / empty: {ratio:.2f}x (rows added in {filled_in} s, then analysed).")
print()
print(f"processed_events: {rows:,} rows, heap {heap / rows:,.0f} + indexes {index / rows:,.0f} bytes per event.")
print(f"webhookd prune: {pruned.strip()} in {prune_secs:.1f} s; left {rows_after:,} rows,"
      f" {dead_after:,} dead tuples, heap {heap_after / 2**20:,.0f} MiB and indexes {index_after / 2**20:,.0f} MiB"
      f" (before: {heap / 2**20:,.0f} and {index / 2**20:,.0f}): deleted rows are bloat until vacuumed.")
sys.exit(0 if empty["passed"] and grown["passed"] else 1)
PY
