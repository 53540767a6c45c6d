#!/usr/bin/env bash
# The upgrade to monthly partitions on a populated database: RETAINED events
# (default 5 million), an outbox row for each (delivered, a hundredth with a
# failed attempt) are written under the schema before partitions, then
# each migration from the partitions on (the later ones too) is applied in
# turn, timed, while pgbench
# inserts new events and their outbox rows all along (8 clients, on
# conflict do nothing, as webhookd's claims do); prints each step's time and the longest an insert
# took during it, which is what the step made ingest wait. Uses
# DATABASE_URL's server when set (a scratch database is created and
# dropped), else a throwaway local cluster.
#
#   scripts/bench-migrate.sh [RETAINED]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

retained=${1:-5000000}
[ "$retained" -ge 1 ] 2>/dev/null || die "RETAINED must be a number of at least 1"
command -v python3 >/dev/null || die "python3 is needed to read pgbench's log"

BENCH_DB=webhookd_migrate
scratch=$(mktemp -d "${TMPDIR:-/tmp}/$BENCH_DB.XXXXXX")
chmod 755 "$scratch"
trap bench_cleanup EXIT
PG_BINDIR=$(pg_bindir)
if [ -z "${DATABASE_URL:-}" ]; then start_cluster "$scratch/data" max_wal_size=4GB; fi
db_url=$(bench_database "$BENCH_DB")
psql=("$PG_BINDIR/psql" -q -v ON_ERROR_STOP=1 -d "$db_url")

first=20261211000001   # the first migration of the partitions
for migration in migrations/*.sql; do
    version=$(basename "$migration" | cut -d_ -f1)
    [ "$version" -lt "$first" ] && "${psql[@]}" -f "$migration" >/dev/null
done
log "adding $retained events and outbox rows under the schema before partitions"
"${psql[@]}" <<SQL
insert into processed_events
    (provider, event_id, event_type, outcome, detail, payload, provider_created_at, received_at)
select 'stripe', 'evt_retained_' || i, 'payment_intent.succeeded', 'processed',
       jsonb_build_object('entry_id', i, 'balance_minor', 150, 'outbox_id', i),
       jsonb_build_object('id', 'evt_retained_' || i, 'object', 'event', 'type', 'payment_intent.succeeded',
           'data', jsonb_build_object('object', jsonb_build_object(
               'id', 'pi_retained_' || i, 'object', 'payment_intent', 'amount', 150, 'currency', 'usd',
               'metadata', jsonb_build_object('user_id', 'retained_' || (i % 10000))))),
       to_timestamp(1700000000 + i), to_timestamp(1700000000 + i)
from generate_series(1, $retained) i;
insert into outbox (topic, dedupe_key, provider, event_id, payload, created_at, delivered_at, attempts)
select 'wallet.credited', 'stripe:evt_retained_' || i, 'stripe', 'evt_retained_' || i,
       jsonb_build_object('user_id', 'retained_' || (i % 10000), 'amount_minor', 150, 'currency', 'USD'),
       to_timestamp(1700000000 + i), to_timestamp(1700000000 + i), 1 + (i % 100 = 0)::int
from generate_series(1, $retained) i;
insert into outbox_attempts (outbox_id, attempt, at, outcome, error)
select id, 1, created_at, 'retry', 'HTTP 503' from outbox where attempts = 2;
vacuum analyze processed_events;
vacuum analyze outbox;
vacuum analyze outbox_attempts;
SQL

cat >"$scratch/insert.sql" <<'SQL'
\set n random(1, 1000000000)
insert into processed_events (provider, event_id, event_type, outcome, payload)
values ('stripe', 'evt_live_' || :n, 'payment_intent.succeeded', 'processed', '{}') on conflict do nothing;
insert into outbox (topic, dedupe_key, provider, event_id, payload)
values ('wallet.credited', 'stripe:evt_live_' || :n, 'stripe', 'evt_live_' || :n, '{}') on conflict do nothing;
SQL
log "pgbench inserting throughout (8 clients)"
(cd "$scratch" && exec "$PG_BINDIR/pgbench" -n -M simple -c 8 -j 2 -T 100000 -l \
    --log-prefix=inserts -f insert.sql "$db_url" >pgbench.log 2>&1) &
BENCH_PIDS="${BENCH_PIDS:-} $!"
sleep 3   # pgbench connected and inserting

: >"$scratch/steps"
for migration in migrations/*.sql; do
    version=$(basename "$migration" | cut -d_ -f1)
    [ "$version" -ge "$first" ] || continue
    # One transaction a file, as `webhookd migrate` runs them, but for the
    # files marked to run without one.
    single=(-1); head -1 "$migration" | grep -q -- '-- no-transaction' && single=()
    started=$(date +%s%N)
    "${psql[@]}" "${single[@]}" -f "$migration" >/dev/null
    ended=$(date +%s%N)
    echo "$(basename "$migration") $started $ended" >>"$scratch/steps"
done
sleep 2
kill $BENCH_PIDS 2>/dev/null || true
wait 2>/dev/null || true

# A client that met an error stops: none may have.
if grep -q 'aborted' "$scratch/pgbench.log"; then
    grep 'aborted' "$scratch/pgbench.log" >&2
    die "inserts failed during the migration"
fi
python3 - "$scratch" "$retained" <<'PY'
import glob, sys
scratch, retained = sys.argv[1], int(sys.argv[2])
# pgbench -l: client, transaction, latency (us), script, epoch s, epoch us
done = []
for path in glob.glob(f"{scratch}/inserts.*"):
    for line in open(path):
        f = line.split()
        if len(f) < 6:
            continue   # the line pgbench was writing when it was stopped
        end = int(f[4]) * 1_000_000 + int(f[5])
        done.append((end - int(f[2]), end, int(f[2])))
print(f"| step ({retained:,} events) | time | longest insert meanwhile | inserts meanwhile |")
print("|---|---|---|---|")
for line in open(f"{scratch}/steps"):
    name, started, ended = line.split()
    lo, hi = int(started) // 1000, int(ended) // 1000
    during = [lat for (start, end, lat) in done if end >= lo and start <= hi]
    longest = max(during, default=0) / 1000
    print(f"| `{name}` | {(hi - lo) / 1e6:.2f} s | {longest:.1f} ms | {len(during):,} |")
PY
