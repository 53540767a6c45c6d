#!/usr/bin/env bash
# webhookd against the seed transaction, in ONE run on one durable Postgres
# (DATABASE_URL's server, scratch databases created and dropped; else a
# throwaway cluster with durability at its defaults: fsync and
# synchronous_commit on). Prints one markdown table, side by side:
#   - pgbench of the seed transaction (bench/seed-txn.sql on
#     bench/seed-schema.sql, 1,000 wallets) at 8, 32 and 64 clients;
#   - webhookd (release build, API and outbox drainer in one process,
#     delivering to a local HTTP sink) under `webhookd drill --users 1000`:
#     unique Stripe credits/s at 8, 32 and 64 senders, the mix (`--mix`) at
#     32, latency, and a duplicate storm (20 copies of each event) at 8;
#   - the drain after the 32-sender run: rows/s delivered from the end of
#     the load until the outbox is empty, and how long that took;
#   - the server's peak RSS (VmHWM), and every run's verification.
# Exits 1 when any run's books do not add up.
#
#   scripts/bench.sh
#
# BENCH_SECONDS=N sets each point's length (default 12: eight points, each
# drill followed by a wait of at most 60 s for the outbox to empty, so a few
# minutes after the build); WEBHOOKD_BIN=path uses that binary instead of
# building a release one.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

seconds=${BENCH_SECONDS:-12}
[ "$seconds" -ge 1 ] 2>/dev/null || die "BENCH_SECONDS must be a whole number of seconds"
command -v python3 >/dev/null || die "python3 is needed (the sink, and to read the drill's JSON)"

bench_setup webhookd_bench max_connections=200 shared_buffers=256MB
[ -x "$PG_BINDIR/pgbench" ] || die "pgbench not found in $PG_BINDIR (Debian: apt-get install postgresql)"
psql=("$PG_BINDIR/psql" -q -v ON_ERROR_STOP=1)

# 1. The seed transaction, in its own scratch database.
BENCH_EXTRA_DBS=webhookd_bench_seed
seed_url=$(bench_database webhookd_bench_seed)
"${psql[@]}" -d "$seed_url" -f bench/seed-schema.sql
"${psql[@]}" -d "$seed_url" -c "insert into wallets (user_id) select 'user_' || g from generate_series(1, 1000) g"
declare -A seed_tps
for clients in 8 32 64; do
    log "pgbench, seed transaction: $clients clients, ${seconds}s"
    seed_tps[$clients]=$("$PG_BINDIR/pgbench" -n -M prepared -f bench/seed-txn.sql -D users=1000 -D amount=1000 \
        -c "$clients" -j 2 -T "$seconds" "$seed_url" | awk '/^tps = / { print $3 }' | tail -n 1)
done
drop_bench_database webhookd_bench_seed
BENCH_EXTRA_DBS=

# 2. webhookd: API and drainer in one process, delivering to a local sink
# that answers 200 and counts what it receives.
sink_port=$(free_port 18180)
python3 - "$sink_port" > "$scratch/sink.log" 2>&1 <<'PY' &
import http.server, sys, threading
lock, count = threading.Lock(), [0]
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        with lock:
            count[0] += 1
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()
    def do_GET(self):  # how many deliveries arrived
        body = str(count[0]).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer.daemon_threads = True
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
PY
BENCH_PIDS=$!
sink_count() { python3 -c 'import sys,urllib.request as u; print(u.urlopen(sys.argv[1], timeout=5).read().decode())' "http://127.0.0.1:$sink_port/"; }
for _ in $(seq 1 100); do
    if sink_count >/dev/null 2>&1; then break; fi
    sleep 0.05
done
sink_count >/dev/null 2>&1 || die "the sink did not start"

secret=whsec_bench
razorpay_secret=rzp_bench
start_webhookd "$binary" "$db_url" "$secret" "$scratch/server.log" \
    WEBHOOKD_ROLE=all RAZORPAY_WEBHOOK_SECRET="$razorpay_secret" \
    WEBHOOKD_SINK_URL="http://127.0.0.1:$sink_port/" WEBHOOKD_SINK_SECRET=whsec_YmVuY2gtc2luay1zaWduaW5nLWtleQ==
server=$WEBHOOKD_PID
idle_rss=$(awk '/VmRSS/ { print $2 }' "/proc/$server/status")

at() { "$PG_BINDIR/psql" -tAq -v ON_ERROR_STOP=1 -d "$db_url" -c "$1"; }

# A failed verification exits 1 but still prints its report: keep it, and
# let the table say so (and fail the script).
drill() {
    DATABASE_URL=$db_url STRIPE_WEBHOOK_SECRET=$secret RAZORPAY_WEBHOOK_SECRET=$razorpay_secret \
        "$binary" drill --url "$WEBHOOKD_URL" --users 1000 --events 10000000 --duration "${seconds}s" "$@" || true
}

# Waits (at most 60 s) until the outbox holds nothing undelivered; prints
# the drain of run RUN's rows as JSON: rows delivered after the last of its
# rows was written (the end of the load, on the database's clock), the
# seconds from then until the last delivery, and rows left undelivered.
drain() { # drain RUN
    local deadline=$(( $(date +%s) + 60 )) prefix="evt_drill_$1_"
    while [ "$(at "select count(*) from outbox where delivered_at is null and dead_at is null")" != 0 ] \
        && [ "$(date +%s)" -lt "$deadline" ]; do
        sleep 0.2
    done
    at "with run as (select * from outbox where starts_with(event_id, '$prefix')),
             load as (select max(created_at) as end_at from run)
        select json_build_object(
            'rows', count(*) filter (where delivered_at > load.end_at),
            'seconds', coalesce(extract(epoch from max(delivered_at) - load.end_at), 0),
            'left', count(*) filter (where delivered_at is null))
        from run, load group by load.end_at"
}

run_of() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])["run"])' "$1"; }

# Each point starts on an empty outbox; the drain after 32 senders is measured.
declare -A credits
for clients in 8 32 64; do
    log "drill: unique Stripe credits, $clients senders, ${seconds}s"
    credits[$clients]=$(drill --concurrency "$clients")
    drained=$(drain "$(run_of "${credits[$clients]}")")
    if [ "$clients" = 32 ]; then drain32=$drained; fi
done
log "drill: the mix, 32 senders, ${seconds}s"
mix=$(drill --mix --concurrency 32)
drain "$(run_of "$mix")" >/dev/null
log "drill: duplicate storm, 20 copies of each event, 8 senders, ${seconds}s"
storm=$(drill --duplicates 20 --concurrency 8)
drain "$(run_of "$storm")" >/dev/null
peak_rss=$(awk '/VmHWM/ { print $2 }' "/proc/$server/status")
outbox_rows=$(at "select count(*) from outbox")
dead_rows=$(at "select count(*) from outbox where dead_at is not null")
undelivered=$(at "select count(*) from outbox where delivered_at is null")
deliveries=$(sink_count)

python3 - "$seconds" "$peak_rss" "$idle_rss" "$outbox_rows" "$dead_rows" "$deliveries" "$undelivered" \
    "${seed_tps[8]}" "${seed_tps[32]}" "${seed_tps[64]}" \
    "${credits[8]}" "${credits[32]}" "${credits[64]}" "$mix" "$storm" \
    "$drain32" <<'PY'
import json, sys
seconds, peak, idle, outbox_rows, dead, deliveries, undelivered = (int(a) for a in sys.argv[1:8])
seed = dict(zip((8, 32, 64), (float(t) for t in sys.argv[8:11])))
credits = dict(zip((8, 32, 64), (json.loads(d) for d in sys.argv[11:14])))
mix, storm = json.loads(sys.argv[14]), json.loads(sys.argv[15])
drain32 = json.loads(sys.argv[16])
runs = [*credits.values(), mix, storm]

def num(x):
    return f"{x:,.0f}"

def ratio(x, c):
    return f"{x / seed[c]:.2f}x" if seed[c] else "n/a"

rows = []
def row(measure, by=None, run=""):
    by = by or {}
    rows.append([measure, *(by.get(c, "–") for c in (8, 32, 64)), run])

row("seed transaction (pgbench), tps", {c: num(t) for c, t in seed.items()})
# Left n/a on purpose: pgbench running the statements webhookd itself runs
# per credit comes with the ingest engine change, which rewrites them.
row("pgbench of webhookd's own statements, tps", {c: "n/a" for c in seed},
    "n/a: comes with the ingest engine change")
row("webhookd unique Stripe credits/s (`--users 1000`)",
    {c: num(d["unique_events_per_sec"]) for c, d in credits.items()})
row("  ratio to the seed transaction", {c: ratio(d["unique_events_per_sec"], c) for c, d in credits.items()})
row("webhookd mix (`--mix`), events/s", {32: num(mix["unique_events_per_sec"])})
row("  ratio to the seed transaction", {32: ratio(mix["unique_events_per_sec"], 32)})
row("credits p50 / p99, ms",
    {c: f"{d['latency_ms']['p50']:.2f} / {d['latency_ms']['p99']:.2f}" for c, d in credits.items()})
row("mix p50 / p99, ms", {32: f"{mix['latency_ms']['p50']:.2f} / {mix['latency_ms']['p99']:.2f}"})
storm_rate = storm["sent"] / storm["seconds"] if storm["seconds"] else 0
row("duplicate storm (20 copies), requests/s", {8: num(storm_rate)})
row("  ratio to the seed transaction", {8: ratio(storm_rate, 8)})
checks = (storm.get("verification") or {}).get("checks", {})
found = checks.get("stripe_credits", {}).get("found", 0)
expected = checks.get("stripe_credits", {}).get("expected", 0)
row("  double credits (must be 0)", {8: f"{max(found - expected, 0)} of {storm['events']:,} events"})
rate = drain32["rows"] / drain32["seconds"] if drain32["seconds"] else 0
row("drain after the load, rows/s", {32: f"{num(rate)} ({drain32['rows']:,} rows)" if drain32["rows"] else "kept up"})
empty = f"{drain32['seconds']:.1f}" if not drain32["left"] else f"> 60 ({drain32['left']:,} rows left)"
row("outbox empty within, s, after the load", {32: empty})
row("server peak RSS (VmHWM)", run=f"{peak / 1024:.1f} MiB (idle {idle / 1024:.1f} MiB)")
row("outbox rows / delivered to the sink / dead / left",
    run=f"{outbox_rows:,} / {deliveries:,} / {dead} / {undelivered}")
ok = all(d["passed"] for d in runs) and dead == 0
def yes(passed):
    return "yes" if passed else "**NO**"
verified = {c: f"credits {yes(d['passed'])}" for c, d in credits.items()}
verified[32] += f", mix {yes(mix['passed'])}"
verified[8] += f", storm {yes(storm['passed'])}"
row("verified (books exact)", verified, yes(ok))

print(f"| measure ({seconds} s a point) | 8 | 32 | 64 | whole run |")
print("|---|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
sys.exit(0 if ok else 1)
PY
