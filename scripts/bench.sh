#!/usr/bin/env bash
# Throughput and latency of webhookd against the database's own ceiling, in
# ONE run on one Postgres with durability on (fsync, synchronous_commit):
#   1. pgbench running the SQL transaction webhookd runs per credit event
#      (claim, credit lock, ledger entry + wallet, deferred check, outbox +
#      notify, outcome) as plain statements, at 8, 32 and 64 clients;
#   2. webhookd (release build, API role, as many connections as the largest
#      pgbench run) under `webhookd drill` with unique
#      events at the same concurrencies;
#   3. a duplicate storm (20 concurrent copies per event);
#   4. the server's peak and idle RSS.
# Prints a markdown table. Uses DATABASE_URL's server when set (a scratch
# database is created and dropped), else a throwaway local cluster.
#
#   scripts/bench.sh [EVENTS_PER_RUN]      (default 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

events=${1:-20000}
[ "$events" -ge 20 ] 2>/dev/null || die "EVENTS_PER_RUN must be a number of at least 20"
seconds=${BENCH_PGBENCH_SECONDS:-15}
require_cargo
command -v python3 >/dev/null || die "python3 is needed to read the drill's JSON"

bench_setup webhookd_bench max_connections=200 shared_buffers=256MB
[ -x "$PG_BINDIR/pgbench" ] || die "pgbench not found in $PG_BINDIR (Debian: apt-get install postgresql)"

# 1. The ceiling: the same transaction as plain statements.
# pgbench reads `:name` as a variable even inside quotes: no colon may be
# followed by a letter in this script's literals (hence chr(58)).
cat > "$scratch/credit.sql" <<'SQL'
\set n random(1, 1000000000000)
\set u random(0, 15)
BEGIN;
insert into processed_events (provider, event_id, event_type, outcome, payload, provider_created_at)
values ('stripe', 'evt_pgb_' || :n::text, 'payment_intent.succeeded', 'pending',
        '{"id": "evt_pgb","object": "event","type": "payment_intent.succeeded","created": 1800000000,"data": {"object": {"id": "pi_pgb","object": "payment_intent","amount": 150,"amount_received": 150,"currency": "usd","metadata": {"user_id": "user_pgb"}}},"livemode": false}'::jsonb,
        to_timestamp(1800000000))
on conflict (provider, event_id) do nothing;
select pg_advisory_xact_lock(hashtextextended('stripe' || chr(58) || 'credit' || chr(58) || 'pi_pgb_' || :n::text, 0));
with entry as (
    insert into wallet_entries (user_id, currency, amount_minor, kind, provider, source_ref, event_id, parent_ref)
    values ('pgb_' || :u::text, 'USD', 150, 'credit', 'stripe', 'pi_pgb_' || :n::text, 'evt_pgb_' || :n::text, null)
    on conflict (provider, kind, source_ref) do nothing
    returning id, user_id, currency, amount_minor
), wallet as (
    insert into wallets (user_id, currency, balance_minor)
    select user_id, currency, amount_minor from entry
    on conflict (user_id, currency) do update
        set balance_minor = wallets.balance_minor + excluded.balance_minor, updated_at = now()
    returning balance_minor
)
select entry.id, wallet.balance_minor from entry, wallet;
with row as (
    insert into outbox (topic, dedupe_key, provider, event_id, payload)
    values ('wallet.credited', 'stripe' || chr(58) || 'evt_pgb_' || :n::text, 'stripe', 'evt_pgb_' || :n::text,
            '{"user_id": "pgb","currency": "USD","amount_minor": 150,"balance_minor": 150,"entry_id": 1,"payment_intent": "pi_pgb"}'::jsonb)
    on conflict do nothing
    returning id
)
select row.id from row, (select pg_notify('webhookd_outbox', '')) as notify;
with taken as (delete from deferred_events where provider = 'stripe' and waits_for = 'pi_pgb_' || :n::text
               returning provider, event_id)
select e.event_id from taken join processed_events e using (provider, event_id);
update processed_events set outcome = 'processed', detail = '{"entry_id": 1}'::jsonb
where provider = 'stripe' and event_id = 'evt_pgb_' || :n::text;
COMMIT;
SQL
declare -A pgbench_tps
for clients in 8 32 64; do
    log "pgbench: $clients clients, ${seconds}s"
    tps=$("$PG_BINDIR/pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "$scratch/credit.sql" "$db_url" \
          | awk '/^tps = / { print $3 }' | tail -n 1)
    pgbench_tps[$clients]=$tps
done

# 2-4. webhookd itself.
secret=whsec_bench
start_webhookd "$binary" "$db_url" "$secret" "$scratch/server.log"
server=$WEBHOOKD_PID
idle_rss=$(awk '/VmRSS/ { print $2 }' "/proc/$server/status")

# A failed verification exits 1 but still prints its report: keep it, and
# let the table below say so (and fail the script).
drill() {
    DATABASE_URL=$db_url STRIPE_WEBHOOK_SECRET=$secret "$binary" drill --url "$WEBHOOKD_URL" "$@" || true
}
declare -A drill_json
for clients in 8 32 64; do
    log "drill: $events unique events, concurrency $clients"
    drill_json[$clients]=$(drill --events "$events" --concurrency "$clients")
done
log "drill: duplicate storm, $((events / 10)) events x 20 copies, concurrency 8"
storm=$(drill --events "$((events / 10))" --duplicates 20 --concurrency 8)
peak_rss=$(awk '/VmHWM/ { print $2 }' "/proc/$server/status")

python3 - "$peak_rss" "$idle_rss" "$storm" \
    "8" "${pgbench_tps[8]}" "${drill_json[8]}" \
    "32" "${pgbench_tps[32]}" "${drill_json[32]}" \
    "64" "${pgbench_tps[64]}" "${drill_json[64]}" <<'PY'
import json, sys
peak, idle, storm = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
rows = sys.argv[4:]
print("| concurrency | pgbench tps (ceiling) | webhookd unique events/s | ratio | p50 ms | p99 ms | verified |")
print("|---|---|---|---|---|---|---|")
ok = storm["passed"]
for i in range(0, len(rows), 3):
    c, tps, d = rows[i], float(rows[i + 1]), json.loads(rows[i + 2])
    ok = ok and d["passed"]
    l = d["latency_ms"]
    print(f"| {c} | {tps:,.0f} | {d['unique_events_per_sec']:,.0f} | {d['unique_events_per_sec'] / tps:.2f}x "
          f"| {l['p50']:.2f} | {l['p99']:.2f} | {d['passed']} |")
rate = storm["sent"] / storm["seconds"]
print()
print(f"Duplicate storm: {storm['events']} events x {storm['duplicates']} copies at concurrency "
      f"{storm['concurrency']}: {rate:,.0f} requests/s, {storm['unique_events_per_sec']:,.0f} unique events/s, "
      f"p99 {storm['latency_ms']['p99']:.2f} ms, statuses {storm['statuses']}, verified {storm['passed']}.")
print(f"Server RSS: {idle / 1024:.1f} MiB idle, {peak / 1024:.1f} MiB peak.")
sys.exit(0 if ok else 1)
PY
