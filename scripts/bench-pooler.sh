#!/usr/bin/env bash
# What running behind PgBouncer in transaction mode costs, piece by piece,
# at 32 clients, on a throwaway durable cluster of its own (with
# pg_stat_statements) with PgBouncer 1.18 in front of it (a pool of 64
# server connections, as many as webhookd's own pool). Every variant runs once a round, in turn,
# so each sees the machine of the others.
#
# 1. pgbench of webhookd's own statements for one credit (scripts/own-statements.py):
#    - prepared: parsed once per connection, then bound (one round trip a
#      statement): what a direct connection with sqlx's statement cache does;
#    - extended: parsed anew at every execution, in the same round trip
#      (pgbench's unnamed statements): the parse and plan alone;
#    - as transaction mode: the BEGIN carries `deallocate all` and two
#      `set local`s, and each statement is prepared (`prepare`, one round
#      trip) and then executed (`execute`, another) inside its transaction:
#      what webhookd does with WEBHOOKD_DB_POOLER=transaction;
#    on Postgres itself and (but prepared, which a transaction pooler cannot
#    carry) through PgBouncer; with PgBouncer's count of round trips per
#    transaction ("queries": one for each exchange that ends in
#    ReadyForQuery), statements and plans per transaction
#    (pg_stat_statements), and CPU per transaction of Postgres and
#    PgBouncer. And an empty transaction (`begin`, `commit`) with and
#    without what transaction mode adds to its BEGIN.
# 2. webhookd (release build, API and drainer in one process, log sink)
#    under `webhookd drill --users 1000 --concurrency 32`:
#    - direct: DATABASE_URL on Postgres itself;
#    - transaction mode on Postgres itself (WEBHOOKD_DB_POOLER=transaction,
#      no pooler): the statement strategy alone;
#    - transaction mode through PgBouncer: what bench.sh measures;
#    - direct mode through PgBouncer in session mode (statement cache on,
#      startup options dropped by PgBouncer): the hop alone, and the round
#      trips of direct mode;
#    credits/s, latency, mean batch; per credit: transactions (Postgres's
#    count), PgBouncer's transactions and round trips (it counts a
#    transaction from any message of an idle client, so also the Sync alone
#    that sqlx sends as each connection goes back to its pool), statements
#    and plans, and the time planning and executing them
#    (pg_stat_statements), and CPU of webhookd, PgBouncer and Postgres.
#
#   scripts/bench-pooler.sh
#
# BENCH_SECONDS=N sets each run's length (default 12), BENCH_ROUNDS=N the
# rounds (default 3); WEBHOOKD_BIN=path uses that binary instead of building
# a release one.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

seconds=${BENCH_SECONDS:-12}
rounds=${BENCH_ROUNDS:-3}
[ "$seconds" -ge 1 ] 2>/dev/null || die "BENCH_SECONDS must be a whole number of seconds"
[ "$rounds" -ge 1 ] 2>/dev/null || die "BENCH_ROUNDS must be a whole number"
command -v curl >/dev/null || die "curl is needed (webhookd's /metrics)"

unset DATABASE_URL   # pg_stat_statements must be preloaded: always a cluster of its own
bench_setup webhookd_bench_pooler max_connections=200 shared_buffers=256MB \
    shared_preload_libraries=pg_stat_statements pg_stat_statements.track_planning=on pg_stat_statements.track_utility=off
"$PG_BINDIR/psql" -q -d "$db_url" -c "create extension pg_stat_statements"
[ -x "$PG_BINDIR/pgbench" ] || die "pgbench not found in $PG_BINDIR (Debian: apt-get install postgresql)"
require_pgbouncer
pool_size=64
start_pgbouncer "$scratch/pgbouncer" "$db_url" "$pool_size"
pooler_port=${PGBOUNCER_URL##*:}
# A session-mode entry for the bench database beside the transaction-mode
# wildcard, PgBouncer's console for SHOW STATS, and direct mode's startup
# options dropped (PgBouncer 1.18 refuses `options` and
# `extra_float_digits`; the session-mode run goes without its timeouts).
read -r pg_host pg_port < <(python3 -c 'import sys,urllib.parse as u; p=u.urlsplit(sys.argv[1]); print(p.hostname or "127.0.0.1", p.port or 5432)' "$db_url")
sed -i -e "/^\[databases\]/a webhookd_session = host=$pg_host port=$pg_port dbname=$BENCH_DB pool_mode=session" \
    -e 's/^ignore_startup_parameters =.*/ignore_startup_parameters = extra_float_digits, options/' \
    -e '$a admin_users = postgres' "$scratch/pgbouncer/pgbouncer.ini"
kill -HUP "$(cat "$PGBOUNCER_PIDFILE")"
sleep 0.5
# total_xact_count and total_query_count of database $1 (its name in PgBouncer).
pooler_counts() {
    "$PG_BINDIR/psql" -tA -F ' ' -h 127.0.0.1 -p "$pooler_port" -U postgres -d pgbouncer -c "show stats" \
        | awk -v db="$1" '$1 == db { print $2, $3; found = 1 } END { if (!found) print 0, 0 }'
}
# Statements executed, plans made, and milliseconds planning and executing
# them in the database of URL $1 since the last pgss_reset.
pgss() {
    "$PG_BINDIR/psql" -tAq -F ' ' -d "$1" -c "
        select coalesce(sum(calls), 0), coalesce(sum(plans), 0),
               round(coalesce(sum(total_plan_time), 0)::numeric, 1), round(coalesce(sum(total_exec_time), 0)::numeric, 1)
        from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database())"
}
pgss_reset() { "$PG_BINDIR/psql" -tAq -d "$1" -c "select pg_stat_statements_reset()" >/dev/null; }
cpu() { awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat"; }
postgres_cpu() { # the cluster's postmaster, the backends it reaped, and its live children
    local main total pid
    main=$(head -n 1 "$PG_CLUSTER_DIR/postmaster.pid")
    total=$(awk '{ printf "%.2f", ($14 + $15 + $16 + $17) / 100 }' "/proc/$main/stat")
    for pid in $(pgrep -P "$main" || true); do
        [ -r "/proc/$pid/stat" ] && total=$(awk -v t="$total" '{ printf "%.2f", t + ($14 + $15) / 100 }' "/proc/$pid/stat")
    done
    echo "$total"
}
pooler_pid=$(cat "$PGBOUNCER_PIDFILE")
results=$scratch/results
: > "$results"

# 1. pgbench of webhookd's own statements, in a migrated scratch database.
BENCH_EXTRA_DBS=webhookd_bench_pooler_own
own_url=$(bench_database webhookd_bench_pooler_own)
DATABASE_URL=$own_url "$binary" migrate
"$PG_BINDIR/psql" -q -d "$own_url" -c "create extension pg_stat_statements"
python3 scripts/own-statements.py > "$scratch/own.sql"
# The same statements as transaction mode runs them: each `prepare`d inside
# the transaction (its pgbench variables as parameters), then `execute`d.
python3 - "$scratch/own.sql" > "$scratch/own-txmode.sql" <<'PY'
import re, sys
n = 0
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line == "begin;":
        print("begin \\; deallocate all \\; set local statement_timeout = 30000 \\; "
              "set local idle_in_transaction_session_timeout = 30000;")
        continue
    names = list(dict.fromkeys(re.findall(r"(?<!:):([a-z]+)\b", line)))
    if line.startswith(("\\", "--")) or line == "commit;" or not names:
        print(line)
        continue
    n += 1
    body = re.sub(r"(?<!:):([a-z]+)\b", lambda m: f"${names.index(m.group(1)) + 1}", line.rstrip(";"))
    print(f"prepare s{n} as {body};")
    print(f"execute s{n}({', '.join(':' + v for v in names)});")
PY
# The BEGIN alone, with and without what transaction mode adds to it.
printf 'begin;\ncommit;\n' > "$scratch/begin.sql"
printf 'begin \\; deallocate all \\; set local statement_timeout = 30000 \\; set local idle_in_transaction_session_timeout = 30000;\ncommit;\n' \
    > "$scratch/begin-txmode.sql"
own_variants="prepared-direct extended-direct txmode-direct extended-pgbouncer txmode-pgbouncer begin-direct begintxmode-direct"
for round in $(seq 1 "$rounds"); do
    for variant in $own_variants; do
        case $variant in
            prepared-*) mode=prepared script=$scratch/own.sql ;;
            extended-*) mode=extended script=$scratch/own.sql ;;
            txmode-*) mode=simple script=$scratch/own-txmode.sql ;;
            begin-*) mode=simple script=$scratch/begin.sql ;;
            begintxmode-*) mode=simple script=$scratch/begin-txmode.sql ;;
        esac
        case $variant in
            *-direct) url=$own_url ;;
            *-pgbouncer) url=$(with_database "$PGBOUNCER_URL" webhookd_bench_pooler_own) ;;
        esac
        log "pgbench, $variant (round $round): 32 clients, ${seconds}s"
        read -r xacts_before queries_before < <(pooler_counts webhookd_bench_pooler_own)
        pgss_reset "$own_url"
        pooler_before=$(cpu "$pooler_pid"); pg_before=$(postgres_cpu)
        out=$("$PG_BINDIR/pgbench" -n -M "$mode" -f "$script" -D users=1000 -D amount=1000 \
            -c 32 -j 2 -T "$seconds" "$url")
        sleep 1   # until pgbench's backends have exited, their CPU in the postmaster's
        pooler_after=$(cpu "$pooler_pid"); pg_after=$(postgres_cpu)
        read -r xacts_after queries_after < <(pooler_counts webhookd_bench_pooler_own)
        statements=$(pgss "$own_url")
        tps=$(awk '/^tps = / { print $3 }' <<<"$out" | tail -n 1)
        latency=$(awk '/^latency average = / { print $4 }' <<<"$out")
        failed=$(awk '/^number of failed transactions: / { print $5 }' <<<"$out")
        printf 'own %s %s %s %s %s %s %s %s %s\n' "$variant" "$tps" "$latency" "${failed:-0}" \
            $((xacts_after - xacts_before)) $((queries_after - queries_before)) \
            "$(awk '/^number of transactions actually processed: / { print $6 }' <<<"$out")" \
            "$pooler_before $pooler_after $pg_before $pg_after" "$statements" >> "$results"
    done
done
drop_bench_database webhookd_bench_pooler_own
BENCH_EXTRA_DBS=

# 2. webhookd, four ways, in turn.
secret=whsec_bench
at() { "$PG_BINDIR/psql" -tAq -v ON_ERROR_STOP=1 -d "$db_url" -c "$1"; }
# Transactions Postgres counted in the bench database. A backend reports
# its counts at most once a second, and within 10 s of going idle.
pg_xacts() { at "select xact_commit + xact_rollback from pg_stat_database where datname = current_database()"; }
metric() { curl -s "$WEBHOOKD_URL/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
serve() { # serve VARIANT
    local logfile=$scratch/server-$1.log
    case $1 in
        direct) start_webhookd "$binary" "$db_url" "$secret" "$logfile" WEBHOOKD_ROLE=all ;;
        txmode-direct) start_webhookd "$binary" "$db_url" "$secret" "$logfile" WEBHOOKD_ROLE=all \
            WEBHOOKD_DB_POOLER=transaction WEBHOOKD_DIRECT_DATABASE_URL="$db_url" ;;
        txmode-pgbouncer) start_webhookd "$binary" "$(with_database "$PGBOUNCER_URL" "$BENCH_DB")" "$secret" "$logfile" \
            WEBHOOKD_ROLE=all WEBHOOKD_DB_POOLER=transaction WEBHOOKD_DIRECT_DATABASE_URL="$db_url" ;;
        session-pgbouncer) start_webhookd "$binary" "$(with_database "$PGBOUNCER_URL" webhookd_session)" "$secret" "$logfile" \
            WEBHOOKD_ROLE=all ;;
    esac
}
pooler_name() { case $1 in txmode-pgbouncer) echo "$BENCH_DB" ;; session-pgbouncer) echo webhookd_session ;; *) echo none ;; esac; }
for round in $(seq 1 "$rounds"); do
    for variant in direct txmode-direct txmode-pgbouncer session-pgbouncer; do
        serve "$variant"
        log "drill: webhookd $variant (round $round): unique Stripe credits, 32 senders, ${seconds}s"
        read -r xacts_before queries_before < <(pooler_counts "$(pooler_name "$variant")")
        server_before=$(cpu "$WEBHOOKD_PID"); pooler_before=$(cpu "$pooler_pid"); pg_before=$(postgres_cpu)
        batches_before=$(metric webhookd_ingest_batches_total); events_before=$(metric webhookd_ingest_batched_events_total)
        pgss_reset "$db_url"
        pg_xacts_before=$(pg_xacts)
        report=$(DATABASE_URL=$db_url STRIPE_WEBHOOK_SECRET=$secret \
            "$binary" drill --url "$WEBHOOKD_URL" --users 1000 --events 10000000 --concurrency 32 \
            --duration "${seconds}s" || true)
        server_after=$(cpu "$WEBHOOKD_PID"); pooler_after=$(cpu "$pooler_pid"); pg_after=$(postgres_cpu)
        batches=$(( $(metric webhookd_ingest_batches_total) - batches_before ))
        events=$(( $(metric webhookd_ingest_batched_events_total) - events_before ))
        read -r xacts_after queries_after < <(pooler_counts "$(pooler_name "$variant")")
        statements=$(pgss "$db_url")
        deadline=$(( $(date +%s) + 60 ))
        while [ "$(at "select count(*) from outbox where delivered_at is null and dead_at is null")" != 0 ] \
            && [ "$(date +%s)" -lt "$deadline" ]; do
            sleep 0.2
        done
        sleep 11
        pg_xacts_after=$(pg_xacts)
        kill "$WEBHOOKD_PID"; wait "$WEBHOOKD_PID" 2>/dev/null || true
        WEBHOOKD_PID=
        if grep -E 'WARN|ERROR' "$scratch/server-$variant.log" >&2; then
            log "webhookd $variant logged the warnings and errors above"
        fi
        printf 'webhookd %s %s %s %s %s %s %s %s %s %s %s %s %s\n' "$variant" "$(tr -d '\n ' <<<"$report")" \
            "$batches" "$events" $((xacts_after - xacts_before)) $((queries_after - queries_before)) \
            "$server_before" "$server_after" "$pooler_before $pooler_after" "$pg_before" "$pg_after" "$statements" \
            $((pg_xacts_after - pg_xacts_before)) >> "$results"
    done
done
dead_rows=$(at "select count(*) from outbox where dead_at is not null")

python3 - "$results" "$seconds" "$dead_rows" <<'PY'
import collections, json, statistics, sys
seconds, dead = int(sys.argv[2]), int(sys.argv[3])
own, hook = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    kind, variant, *rest = line.split()
    if kind == "own":
        tps, latency, failed, xacts, queries, done, b0, b1, p0, p1, calls, plans, plan_ms, exec_ms = rest
        own[variant].append((float(tps), float(latency), int(failed), int(xacts), int(queries), int(done),
                             float(b1) - float(b0), float(p1) - float(p0),
                             int(calls), int(plans), float(plan_ms), float(exec_ms)))
    else:
        report, batches, events, xacts, queries, s0, s1, b0, b1, p0, p1, calls, plans, plan_ms, exec_ms, pg_xacts = rest
        hook[variant].append((json.loads(report), int(batches), int(events), int(xacts), int(queries),
                              float(s1) - float(s0), float(b1) - float(b0), float(p1) - float(p0), int(pg_xacts),
                              int(calls), int(plans), float(plan_ms), float(exec_ms)))

def num(x):
    return f"{x:,.0f}"
def runs(values, fmt=num):
    return " / ".join(fmt(v) for v in values)
def median(values):
    return statistics.median(values) if values else 0

def pg_time(rs, count):
    """Statements and plans, and planning and executing µs, per unit of count."""
    n = sum(count(r) for r in rs)
    if not n:
        return "–", "–"
    calls, plans = sum(r[-4] for r in rs), sum(r[-3] for r in rs)
    plan_us, exec_us = sum(r[-2] for r in rs) * 1e3 / n, sum(r[-1] for r in rs) * 1e3 / n
    return f"{calls / n:.2f} / {plans / n:.2f}", f"{plan_us:,.0f} / {exec_us:,.0f}"

print(f"pgbench, webhookd's own statements for one credit, 32 clients, {seconds} s a run (runs in order; median):")
print()
print("| statements | tps | median | to prepared, direct | latency avg, ms | round trips per transaction (PgBouncer) "
      "| statements / plans per transaction | CPU per transaction, µs: Postgres / PgBouncer | failed |")
print("|---|---|---|---|---|---|---|---|---|")
base = median([r[0] for r in own["prepared-direct"]])
labels = {
    "prepared-direct": "prepared once, direct",
    "extended-direct": "parsed at every execution, direct",
    "txmode-direct": "as transaction mode (prepare + execute), direct",
    "extended-pgbouncer": "parsed at every execution, through PgBouncer",
    "txmode-pgbouncer": "as transaction mode (prepare + execute), through PgBouncer",
}
for variant, label in labels.items():
    rs = own[variant]
    m = median([r[0] for r in rs])
    xacts, queries = sum(r[3] for r in rs), sum(r[4] for r in rs)
    trips = f"{queries / xacts:.2f}" if xacts else "–"
    statements, _ = pg_time(rs, lambda r: r[5])
    done = sum(r[5] for r in rs)
    cpu = f"{sum(r[7] for r in rs) / done * 1e6:,.0f} / {sum(r[6] for r in rs) / done * 1e6:,.0f}" if done else "–"
    print(f"| {label} | {runs([r[0] for r in rs])} | {num(m)} | {m / base:.2f}x | "
          f"{runs([r[1] for r in rs], lambda v: f'{v:.2f}')} | {trips} | {statements} | {cpu} | {sum(r[2] for r in rs)} |")
print()
print("| the BEGIN alone (`begin`, `commit`), direct | tps | median | 1 / median tps, µs | Postgres CPU per transaction, µs |")
print("|---|---|---|---|---|")
for variant, label in {"begin-direct": "`begin`", "begintxmode-direct":
                       "`begin; deallocate all; set local` ×2, one round trip"}.items():
    rs = own[variant]
    rates = [r[0] for r in rs]
    m, done = median(rates), sum(r[5] for r in rs)
    cpu = f"{sum(r[7] for r in rs) / done * 1e6:,.1f}" if done else "–"
    print(f"| {label} | {runs(rates)} | {num(m)} | {1e6 / m:,.1f} | {cpu} |" if m else f"| {label} | – | – | – | – |")
print()
print(f"webhookd, unique Stripe credits, 32 senders, 1,000 wallets, log sink, {seconds} s a run (runs in order; median):")
print()
print("| webhookd | credits/s | median | to direct | p50 / p99, ms | mean batch | transactions per credit (Postgres) "
      "| PgBouncer's transactions / round trips per credit | verified |")
print("|---|---|---|---|---|---|---|---|---|")
base = median([r[0]["unique_events_per_sec"] for r in hook["direct"]])
labels = {
    "direct": "direct",
    "txmode-direct": "transaction mode, on Postgres itself",
    "txmode-pgbouncer": "transaction mode, through PgBouncer",
    "session-pgbouncer": "direct mode, through PgBouncer in session mode",
}
ok = dead == 0
costs = []
for variant, label in labels.items():
    rs = hook[variant]
    rates = [r[0]["unique_events_per_sec"] for r in rs]
    m = median(rates)
    events = sum(r[0]["events"] for r in rs)
    batches, batched = sum(r[1] for r in rs), sum(r[2] for r in rs)
    xacts, queries = sum(r[3] for r in rs), sum(r[4] for r in rs)
    trips = f"{xacts / events:.2f} / {queries / events:.2f}" if xacts and events else "–"
    pg_xacts = f"{sum(r[8] for r in rs) / events:.2f}" if events else "–"
    lat = "; ".join(f"{r[0]['latency_ms']['p50']:.2f} / {r[0]['latency_ms']['p99']:.2f}" for r in rs)
    passed = all(r[0]["passed"] for r in rs)
    ok = ok and passed
    mean_batch = f"{batched / batches:.1f}" if batches else "–"
    print(f"| {label} | {runs(rates)} | {num(m)} | {m / base:.2f}x | {lat} | {mean_batch} | {pg_xacts} | {trips} | "
          f"{'yes' if passed else '**NO**'} |")
    if events:
        per = lambda i: sum(r[i] for r in rs) / events * 1e6
        statements, times = pg_time(rs, lambda r: r[0]["events"])
        plan_exec = sum(r[-2] + r[-1] for r in rs) * 1e3 / events
        costs.append(f"| {label} | {per(5):,.0f} | {per(6):,.0f} | {per(7):,.0f} | {statements} | {times} | "
                     f"{per(7) - plan_exec:,.0f} |")
print()
print("| per credit (all runs) | webhookd CPU, µs | PgBouncer CPU, µs | Postgres CPU, µs | statements / plans "
      "| planning / executing, µs (the backends' clocks) | Postgres CPU besides, µs |")
print("|---|---|---|---|---|---|---|")
for line in costs:
    print(line)
print()
print(f"dead outbox rows: {dead}")
sys.exit(0 if ok else 1)
PY
