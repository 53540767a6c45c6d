#!/usr/bin/env bash
# Where the time goes under load: a release webhookd (API and drainer in one
# process, log sink) on a throwaway durable cluster with pg_stat_statements,
# driven by `webhookd drill` at 32 senders over 1,000 wallets. Prints the CPU
# seconds of webhookd, the drill and Postgres during the load, the mean
# batch size, and the statements by total time (calls, rows per call, mean
# and total milliseconds).
#
#   scripts/profile.sh [drill arguments...]     # e.g. --mix, --checkout
#
# PROFILE_SECONDS=N sets the load's length (default 10), PROFILE_SENDERS=N
# the senders (default 32); PROFILE_SINK=http delivers to the HTTP sink of
# scripts/bench.sh instead of the log sink (its CPU is shown too);
# WEBHOOKD_BIN=path uses that binary instead of building a release one, and
# PROFILE_DRILL_BIN=path drives it with that binary's drill (an older
# server under a newer drill). Other WEBHOOKD_* variables reach the server
# (e.g. WEBHOOKD_BATCH_CONCURRENCY).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

seconds=${PROFILE_SECONDS:-10}
senders=${PROFILE_SENDERS:-32}
unset DATABASE_URL   # pg_stat_statements must be preloaded: always a cluster of its own
bench_setup webhookd_profile shared_preload_libraries=pg_stat_statements max_connections=200
psql=("$PG_BINDIR/psql" -tAq -v ON_ERROR_STOP=1 -d "$db_url")
"${psql[@]}" -c "create extension pg_stat_statements"

secret=whsec_profile
sink=()
if [ "${PROFILE_SINK:-log}" = http ]; then
    start_sink "$scratch/sink.log"
    sink=(WEBHOOKD_SINK_URL="http://127.0.0.1:$sink_port/"
          WEBHOOKD_SINK_SECRET=whsec_cHJvZmlsZS1zaW5rLXNpZ25pbmcta2V5)
fi
start_webhookd "$binary" "$db_url" "$secret" "$scratch/server.log" WEBHOOKD_ROLE=all \
    RAZORPAY_WEBHOOK_SECRET=rzp_profile "${sink[@]}"
server=$WEBHOOKD_PID

# CPU seconds (user + system) of a process and its children so far.
cpu() { awk '{ printf "%.2f", ($14 + $15 + $16 + $17) / 100 }' "/proc/$1/stat"; }
postgres_cpu() { # the cluster's postmaster and all its children
    local main total=0 pid
    main=$(head -n 1 "$scratch/data/postmaster.pid")
    for pid in "$main" $(pgrep -P "$main" || true); do
        [ -r "/proc/$pid/stat" ] && total=$(awk -v t="$total" '{ printf "%.2f", t + ($14 + $15) / 100 }' "/proc/$pid/stat")
    done
    echo "$total"
}
metric() { curl -s "$WEBHOOKD_URL/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

"${psql[@]}" -c "select pg_stat_statements_reset()" >/dev/null
sink_cpu() { if [ -n "${sink_pid:-}" ]; then cpu "$sink_pid"; else echo 0; fi; }
server_before=$(cpu "$server"); pg_before=$(postgres_cpu); sink_before=$(sink_cpu)
batches_before=$(metric webhookd_ingest_batches_total); events_before=$(metric webhookd_ingest_batched_events_total)
log "drill: $senders senders, ${seconds}s $*"
DATABASE_URL=$db_url STRIPE_WEBHOOK_SECRET=$secret RAZORPAY_WEBHOOK_SECRET=rzp_profile \
    /usr/bin/time -f "%U %S" -o "$scratch/drill.time" \
    "${PROFILE_DRILL_BIN:-$binary}" drill --url "$WEBHOOKD_URL" --users 1000 --events 10000000 --concurrency "$senders" \
    --duration "${seconds}s" "$@" > "$scratch/drill.json" || true
server_after=$(cpu "$server"); pg_after=$(postgres_cpu); sink_after=$(sink_cpu)
batches=$(( $(metric webhookd_ingest_batches_total) - batches_before ))
events=$(( $(metric webhookd_ingest_batched_events_total) - events_before ))

python3 - "$scratch/drill.json" "$scratch/drill.time" "$server_before" "$server_after" \
    "$pg_before" "$pg_after" "$batches" "$events" "$sink_before" "$sink_after" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
drill_cpu = sum(float(x) for x in open(sys.argv[2]).read().split()[-2:])
server = float(sys.argv[4]) - float(sys.argv[3])
postgres = float(sys.argv[6]) - float(sys.argv[5])
batches, events = int(sys.argv[7]), int(sys.argv[8])
sink = float(sys.argv[10]) - float(sys.argv[9])
rate = report["unique_events_per_sec"]
seconds = report["seconds"]
print(f"load: {report['events']:,} events in {seconds:.1f} s, {rate:,.0f} events/s, "
      f"p50/p99 {report['latency_ms']['p50']:.2f} / {report['latency_ms']['p99']:.2f} ms, "
      f"verified {report['passed']}")
print(f"mean batch: {events / batches:.1f} events ({batches:,} batches)" if batches else "no batches")
print("CPU seconds during the load (2 cores = {:.0f} available):".format(2 * seconds))
for name, used in [("webhookd (API + drainer)", server), ("drill (load generator)", drill_cpu),
                   ("Postgres (all backends)", postgres)] + ([("HTTP sink", sink)] if sink else []):
    per_event = used / report["events"] * 1e6 if report["events"] else 0
    print(f"  {name:26} {used:6.2f} s  {per_event:6.0f} us/event")
PY
echo
echo "statements by total time (pg_stat_statements):"
"${psql[@]}" -F ' | ' -c "
    select calls, round(rows::numeric / greatest(calls, 1), 1) as rows_per_call,
           round(mean_exec_time::numeric, 3) as mean_ms, round(total_exec_time::numeric) as total_ms,
           left(regexp_replace(query, '\s+', ' ', 'g'), 90)
    from pg_stat_statements
    where dbid = (select oid from pg_database where datname = current_database())
    order by total_exec_time desc limit 15"
