#!/usr/bin/env bash
# Throughput as the tables grow: unique events/s at 32 concurrent senders
# on empty tables, then again, on the same running server, after RETAINED
# events (and as many ledger entries) were added and the tables analysed.
# Durability stays on. Uses DATABASE_URL's server when set (a scratch
# database is created and dropped), else a throwaway local cluster.
# The retained events are past months of at most 10 million each (at least
# two months), each its own partition. Then the bytes each retained event
# takes, and retention both ways: the first month's events deleted row by
# row in batches (what `webhookd prune` did before partitions, its
# statement kept here), the other months' partitions detached and dropped
# by `webhookd prune`, and what each leaves behind; then the disk's own
# floor for a drop: `rm` of a month's bytes of files.
#
#   scripts/bench-growth.sh [EVENTS_PER_RUN] [RETAINED]   (defaults 20000 5000000)
#
# Disk: about 1 KiB a retained event with its ledger entry (50 GiB at 50
# million), and time: about 15 minutes at 10 million from a release build.
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

# The drill's check of its run reads every event of the run by prefix: at
# 50 million retained events that is longer than the default statement
# timeout.
drill() {
    DATABASE_URL=$db_url WEBHOOKD_DB_STATEMENT_TIMEOUT=600s STRIPE_WEBHOOK_SECRET=$secret \
        "$binary" drill --url "$WEBHOOKD_URL" \
        --events "$events" --concurrency 32 || true
}
log "drill on empty tables: $events unique events, concurrency 32"
empty=$(drill)

# The months: at most 10 million events each, at least two, the first in
# January 2023; event i is in month i mod months, at an even pace within it.
months=$(( (retained + 9999999) / 10000000 ))
[ "$months" -ge 2 ] || months=2
first_month=2023-01-01
month_of() { date -u -d "$first_month + $1 month" +%F; }
log "adding $retained retained events and ledger entries, in $months months from $first_month"
started=$(date +%s)
"$PG_BINDIR/psql" -q -v ON_ERROR_STOP=1 -d "$db_url" \
    -c "insert into wallets (user_id, currency, balance_minor)
        select 'retained_' || u, 'USD', 0 from generate_series(0, 9999) u"
for (( m = 0; m < months; m++ )); do
    month=$(month_of "$m")
    log "  month $month"
    # Rows shaped like the ones webhookd writes for a credit, older than any new one.
    "$PG_BINDIR/psql" -q -v ON_ERROR_STOP=1 -d "$db_url" >/dev/null <<SQL
select add_month_partition('processed_events', '$month');
insert into processed_events
    (provider, event_id, event_type, outcome, detail, payload, provider_created_at, received_at, month)
select 'stripe', 'evt_retained_' || i, 'payment_intent.succeeded', 'processed',
       jsonb_build_object('entry_id', i, 'balance_minor', 150, 'outbox_id', i, 'applied_deferred', '[]'::jsonb),
       jsonb_build_object('id', 'evt_retained_' || i, 'object', 'event', 'type', 'payment_intent.succeeded',
           'created', 1700000000 + i, 'livemode', false,
           'data', jsonb_build_object('object', jsonb_build_object(
               'id', 'pi_retained_' || i, 'object', 'payment_intent', 'amount', 150,
               'amount_received', 150, 'currency', 'usd', 'status', 'succeeded',
               'metadata', jsonb_build_object('user_id', 'retained_' || (i % 10000))))),
       at, at, date '$month'
from generate_series(1, $retained) i,
     lateral (select date '$month' + (i / $months % 2500000) * interval '1 second' as at) t
where i % $months = $m;
insert into wallet_entries (user_id, currency, amount_minor, kind, provider, source_ref, event_id, created_at)
select 'retained_' || (i % 10000), 'USD', 150, 'credit', 'stripe', 'pi_retained_' || i, 'evt_retained_' || i,
       date '$month' + (i / $months % 2500000) * interval '1 second'
from generate_series(1, $retained) i
where i % $months = $m;
SQL
done
"$PG_BINDIR/psql" -q -v ON_ERROR_STOP=1 -d "$db_url" <<SQL
update wallets w set balance_minor = s.total
from (select user_id, currency, sum(amount_minor)::bigint as total from wallet_entries group by 1, 2) s
where w.user_id = s.user_id and w.currency = s.currency;
vacuum analyze;
SQL
filled_in=$(( $(date +%s) - started ))

log "drill with $retained retained events: $events unique events, concurrency 32"
grown=$(drill)

# What a retained event costs on disk (every partition's heap and indexes),
# then retention both ways.
sizes() {
    "$PG_BINDIR/psql" -qAt -F ' ' -d "$db_url" -c "select sum(pg_relation_size(relid)),
        sum(pg_indexes_size(relid)), (select count(*) from processed_events),
        (select coalesce(sum(n_dead_tup), 0) from pg_stat_user_tables where relname like 'processed_events%')
        from pg_partition_tree('processed_events') where isleaf"
}
read -r heap_before index_before rows_before _ <<<"$(sizes)"
log "deleting $first_month's month of events row by row (batches of 5000, a transaction each)"
rows_started=$(date +%s%N)
"$PG_BINDIR/psql" -q -v ON_ERROR_STOP=1 -d "$db_url" <<SQL
create procedure bench_delete_rows(cutoff timestamptz) language plpgsql as \$\$
declare deleted bigint;
begin
    loop
        delete from processed_events
        where (provider, event_id) in (
            select provider, event_id from processed_events
            where received_at < cutoff and outcome <> 'deferred'
              and not exists (select 1 from wallet_entries w
                              where w.provider = processed_events.provider
                                and w.event_id = processed_events.event_id
                                and w.created_at >= cutoff)
            limit 5000
            for update skip locked);
        get diagnostics deleted = row_count;
        commit;
        exit when deleted < 5000;
    end loop;
end \$\$;
call bench_delete_rows('$(month_of 1)');
drop procedure bench_delete_rows;
SQL
rows_ms=$(( ($(date +%s%N) - rows_started) / 1000000 ))
"$PG_BINDIR/psql" -q -d "$db_url" -c "select pg_stat_force_next_flush()" >/dev/null 2>&1 || true
sleep 1   # the statistics collector's counts of dead tuples
read -r _ _ rows_between dead_between <<<"$(sizes)"
log "pruning the rest with webhookd prune (whole months)"
prune_started=$(date +%s%N)
pruned=$(DATABASE_URL=$db_url "$binary" prune --older-than 30d)
prune_ms=$(( ($(date +%s%N) - prune_started) / 1000000 ))
"$PG_BINDIR/psql" -q -d "$db_url" -c "select pg_stat_force_next_flush()" >/dev/null 2>&1 || true
sleep 1
read -r heap_after index_after rows_after dead_after <<<"$(sizes)"

# The disk's own floor for a drop: the files of the last month's partition
# (its heap and indexes, its share of the bytes above), written as 1 GiB
# files as Postgres writes its segments, synced, then removed.
month_gib=$(( ((heap_before + index_before) / months + 536870912) / 1073741824 ))
log "removing $month_gib GiB of files with rm, for the disk's floor"
mkdir "$scratch/floor"
for (( i = 0; i < month_gib; i++ )); do
    dd if=/dev/zero of="$scratch/floor/$i" bs=1M count=1024 status=none
done
sync
rm_started=$(date +%s%N)
rm -r "$scratch/floor"
rm_ms=$(( ($(date +%s%N) - rm_started) / 1000000 ))

python3 - "$retained" "$filled_in" "$empty" "$grown" "$heap_before" "$index_before" "$rows_before" \
    "$rows_ms" "$rows_between" "$dead_between" \
    "$prune_ms" "$pruned" "$heap_after" "$index_after" "$rows_after" "$dead_after" \
    "$month_gib" "$rm_ms" <<'PY'
import json, sys
retained, filled_in = int(sys.argv[1]), int(sys.argv[2])
empty, grown = json.loads(sys.argv[3]), json.loads(sys.argv[4])
heap, index, rows = (int(v) for v in sys.argv[5:8])
rows_secs, rows_between, dead_between = int(sys.argv[8]) / 1000, int(sys.argv[9]), int(sys.argv[10] or 0)
prune_secs, pruned = int(sys.argv[11]) / 1000, sys.argv[12]
heap_after, index_after, rows_after, dead_after = (int(v or 0) for v in sys.argv[13:17])
month_gib, rm_secs = int(sys.argv[17]), int(sys.argv[18]) / 1000
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
deleted = rows - rows_between
print(f"Row by row (the first month, batches of 5000): {deleted:,} events deleted in {rows_secs:.1f} s,"
      f" leaving {dead_between:,} dead tuples for vacuum.")
print(f"webhookd prune (whole months) in {prune_secs:.2f} s, the whole command:")
for line in pruned.strip().splitlines():
    print(f"    {line}")
print(f"It left {rows_after:,} rows, {dead_after:,} dead tuples, heap {heap_after / 2**20:,.0f} MiB and"
      f" indexes {index_after / 2**20:,.0f} MiB (before: {heap / 2**20:,.0f} and {index / 2**20:,.0f}).")
print(f"The disk's floor: rm of {month_gib} files of 1 GiB (a month's bytes) took {rm_secs:.2f} s.")
sys.exit(0 if empty["passed"] and grown["passed"] else 1)
PY
