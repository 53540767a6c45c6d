#!/usr/bin/env bash
# Throughput as the tables grow: unique events/s at 32 concurrent senders
# on empty tables, then again, on the same running server, after 5 million
# retained events (and their 5 million ledger entries) were added and the
# tables analysed. Durability stays on. Uses DATABASE_URL's server when set
# (a scratch database is created and dropped), else a throwaway local cluster.
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

python3 - "$retained" "$filled_in" "$empty" "$grown" <<'PY'
import json, sys
retained, filled_in = int(sys.argv[1]), int(sys.argv[2])
empty, grown = json.loads(sys.argv[3]), json.loads(sys.argv[4])
print("| tables | unique events/s | p50 ms | p99 ms | verified |")
print("|---|---|---|---|---|")
for name, d in (("empty", empty), (f"{retained:,} retained events", grown)):
    l = d["latency_ms"]
    print(f"| {name} | {d['unique_events_per_sec']:,.0f} | {l['p50']:.2f} | {l['p99']:.2f} | {d['passed']} |")
ratio = grown["unique_events_per_sec"] / empty["unique_events_per_sec"]
print()
print(f"Ratio with {retained:,} retained events / empty: {ratio:.2f}x (rows added in {filled_in} s, then analysed).")
sys.exit(0 if empty["passed"] and grown["passed"] else 1)
PY
