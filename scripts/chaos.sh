#!/usr/bin/env bash
# Tries hard to break webhookd's promise (an event answered 2xx is applied
# exactly once; one not answered 2xx leaves nothing behind and is applied
# once when retried; every committed outbox row reaches the sink at least
# once under a stable id), on loopback, against its own throwaway Postgres
# cluster (scenario 2 stops it). Each scenario prints a PASS or FAIL line
# with its figures; the script fails if any scenario failed.
#
#   scripts/chaos.sh            all seven scenarios (about 5 minutes)
#   scripts/chaos.sh --short    one crash, one database outage, a sweep
#                               of 1,000 events and a restore drill (CI)
#   ... --pooler                the same with webhookd's DATABASE_URL on
#                               PgBouncer in transaction mode
#                               (WEBHOOKD_DB_POOLER=transaction), and no
#                               direct URL: it polls, and migrates nothing
#   ... --pooler-direct         the same, with WEBHOOKD_DIRECT_DATABASE_URL
#                               for migrations and LISTEN
# In every mode, an answer 500 to a delivery fails its scenario: whatever a
# restart, an outage or a pooler causes is retryable, and answered 503.
#
# WEBHOOKD_BIN=path uses that binary instead of building a release one.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

short= pooler=
for arg in "$@"; do
    case "$arg" in
        --short) short=1 ;;
        --pooler) pooler=transaction ;;
        --pooler-direct) pooler=direct ;;
        *) die "usage: scripts/chaos.sh [--short] [--pooler | --pooler-direct]" ;;
    esac
done
command -v python3 >/dev/null || die "python3 is needed (counting sink, signing, JSON)"
command -v curl >/dev/null || die "curl is needed"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/webhookd-chaos.XXXXXX")
chmod 755 "$scratch"
pids=()
cleanup() {
    set +e
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
    wait 2>/dev/null
    stop_pgbouncer
    stop_cluster
    rm -rf "$scratch"
}
trap cleanup EXIT

# Our own cluster, always: the outage scenario stops it.
unset DATABASE_URL
start_cluster "$scratch/data" max_connections=300
admin_url=$DATABASE_URL
mode=""
if [ -n "$pooler" ]; then
    require_pgbouncer
    start_pgbouncer "$scratch/pgbouncer" "$admin_url" 20
    mode="[PgBouncer, transaction mode, $([ "$pooler" = direct ] && echo "a direct URL" || echo "no direct URL")] "
fi
release_binary
secret=whsec_chaos_endpoint
sink_secret=whsec_Y2hhb3Mtc2luay1zaWduaW5nLWtleQ==
failures=0
results=()

report() { # report PASS|FAIL "scenario: figures"
    results+=("$1 $mode$2")
    printf '%s %s%s\n' "$1" "$mode" "$2"
    [ "$1" = PASS ] || failures=$((failures + 1))
}

psql_at() { "$PG_BINDIR/psql" -tAq -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }

# app_env DB_URL: the database settings of a webhookd process of DB_URL's
# database, one VAR=value a line: direct, or on PgBouncer (--pooler,
# --pooler-direct). The checks read DB_URL directly.
app_env() {
    case "$pooler" in
        "") printf 'DATABASE_URL=%s\n' "$1" ;;
        *)
            printf 'DATABASE_URL=%s\nWEBHOOKD_DB_POOLER=transaction\n' \
                "$(with_database "$PGBOUNCER_URL" "$(basename "$1")")"
            if [ "$pooler" = direct ]; then printf 'WEBHOOKD_DIRECT_DATABASE_URL=%s\n' "$1"; fi
            ;;
    esac
}

# A counting sink: appends each delivery's webhook-id to FILE (and, with
# MESSAGES, "webhook-id topic event_id" to that file), answers 204.
start_sink() { # start_sink PORT FILE [MESSAGES]
    python3 - "$1" "$2" "${3:-}" > "$scratch/sink-$1.log" 2>&1 <<'PY' &
import http.server, json, sys, threading
port, path, messages = int(sys.argv[1]), sys.argv[2], sys.argv[3]
lock = threading.Lock()
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        webhook_id = self.headers.get("webhook-id", "")
        with lock:
            with open(path, "a") as f:
                f.write(webhook_id + "\n")
            if messages:
                message = json.loads(body)
                with open(messages, "a") as f:
                    f.write(f"{webhook_id} {message.get('type')} {message.get('event_id')}\n")
        self.send_response(204)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
PY
    SINK_PID=$!
    pids+=("$SINK_PID")
    for _ in $(seq 1 100); do
        if curl -s -o /dev/null "http://127.0.0.1:$1/"; then return 0; fi
        sleep 0.05
    done
    die "the counting sink did not start"
}

# serve DB_URL PORT SINK_PORT [VAR=value...]: starts a server (API and
# drainer) in the background; sets SERVER_PID once /readyz answers 200.
# Retry policy as shipped (20 attempts before a dead letter), with shorter
# waits: backoff capped at 2 s, a 10 s lease (a killed drainer's rows come
# back after it), a 5 s sink timeout.
serve() {
    local db_url=$1 port=$2 sink_port=$3; shift 3
    local database
    mapfile -t database < <(app_env "$db_url")
    env "${database[@]}" WEBHOOKD_LISTEN="127.0.0.1:$port" WEBHOOKD_ADMIN_LISTEN=127.0.0.1:0 STRIPE_WEBHOOK_SECRET="$secret" \
        WEBHOOKD_SINK_URL="http://127.0.0.1:$sink_port/" WEBHOOKD_SINK_SECRET="$sink_secret" \
        WEBHOOKD_OUTBOX_BACKOFF_CAP=2s WEBHOOKD_SINK_TIMEOUT=5s WEBHOOKD_OUTBOX_LEASE=10s \
        WEBHOOKD_LOG_FORMAT=json RUST_LOG=warn \
        "$@" "$binary" serve >> "$scratch/server-$port.log" 2>&1 &
    SERVER_PID=$!
    pids+=("$SERVER_PID")
    wait_ready "$port" 30 || { tail -n 20 "$scratch/server-$port.log" >&2; die "webhookd did not become ready"; }
}

wait_ready() { # wait_ready PORT SECONDS
    local tries=$(( $2 * 20 ))
    for _ in $(seq 1 "$tries"); do
        if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz")" = 200 ]; then return 0; fi
        sleep 0.05
    done
    return 1
}

# Waits (at most SECONDS) until no outbox row waits for delivery.
wait_drained() { # wait_drained DB_URL SECONDS
    local deadline=$(( $(date +%s) + $2 ))
    while [ "$(psql_at "$1" "select count(*) from outbox where delivered_at is null and dead_at is null")" != 0 ]; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# Compares the outbox with what the sink received: prints
# "rows deliveries missing unknown dead".
delivery_check() { # delivery_check DB_URL FILE
    psql_at "$1" "select id from outbox" > "$scratch/outbox-ids"
    local dead
    dead=$(psql_at "$1" "select count(*) from outbox where dead_at is not null")
    python3 - "$scratch/outbox-ids" "$2" "$dead" <<'PY'
import sys
rows = set(open(sys.argv[1]).read().split())
received = [line.strip() for line in open(sys.argv[2]) if line.strip()] if __import__("os").path.exists(sys.argv[2]) else []
print(len(rows), len(received), len(rows - set(received)), len(set(received) - rows), sys.argv[3])
PY
}

drill() { # drill DB_URL URL... -- drill args
    local db_url=$1; shift
    DATABASE_URL=$db_url STRIPE_WEBHOOK_SECRET=$secret "$binary" drill "$@" || true
}

json_field() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, {"d": d}))' "$1" "$2"; }

reconciled() { DATABASE_URL=$1 "$binary" reconcile > "$scratch/reconcile.out" 2>&1; }

# Whether the JSON answer of a drill or a delivery run counts no 500.
no_500() { [ "$(json_field "$1" 'd["statuses"].get("500", 0)')" = 0 ]; }

# Signs and posts one payment_intent.succeeded; prints the HTTP status.
post_credit() { # post_credit PORT EVENT_ID USER AMOUNT
    local body header
    body=$(printf '{"id":"%s","object":"event","type":"payment_intent.succeeded","created":%s,"data":{"object":{"id":"pi_%s","object":"payment_intent","amount":%s,"amount_received":%s,"currency":"usd","metadata":{"user_id":"%s"}}},"livemode":false}' \
        "$2" "$(date +%s)" "$2" "$4" "$4" "$3")
    header=$(python3 -c 'import hmac,hashlib,sys,time; t=str(int(time.time())); print("t="+t+",v1="+hmac.new(sys.argv[1].encode(), (t+"."+sys.argv[2]).encode(), hashlib.sha256).hexdigest())' "$secret" "$body")
    curl -s -o /dev/null -w '%{http_code}' --max-time 30 "http://127.0.0.1:$1/webhooks/stripe" \
        -H "Stripe-Signature: $header" -H 'Content-Type: application/json' --data-binary "$body" || echo 000
}

# The fake of Stripe's Events API (scripts/fake-stripe-events.py) on PORT,
# serving FILE to KEY; sets FAKE_PID once it answers.
start_fake_stripe() { # start_fake_stripe PORT KEY FILE
    python3 scripts/fake-stripe-events.py "$1" "$2" "$3" > "$scratch/fake-stripe-$1.log" 2>&1 &
    FAKE_PID=$!
    pids+=("$FAKE_PID")
    for _ in $(seq 1 100); do
        if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/v1/events")" = 401 ]; then return 0; fi
        sleep 0.05
    done
    die "the fake Stripe API did not start"
}

# Signs and posts each event of FILE (one JSON body a line) COPIES times at
# once, CONCURRENCY requests in flight, retrying 5xx and connection errors
# like a provider (for at most 2 minutes in all); writes one JSON line to
# OUT: statuses, the outcomes of the 2xx answers, copies given up on.
deliver() { # deliver PORT FILE COPIES CONCURRENCY OUT
    python3 - "$1" "$2" "$3" "$4" "$secret" > "$5" <<'PY' &
import collections, hashlib, hmac, http.client, json, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
port, path, copies, concurrency, secret = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
bodies = [line.strip() for line in open(path) if line.strip()]
local, lock = threading.local(), threading.Lock()
statuses, outcomes, gave_up = collections.Counter(), collections.Counter(), 0
deadline = time.monotonic() + 120
def post(body):
    global gave_up
    wait = 0.05
    while time.monotonic() < deadline:
        t = str(int(time.time()))
        signature = hmac.new(secret.encode(), (t + "." + body).encode(), hashlib.sha256).hexdigest()
        try:
            if getattr(local, "conn", None) is None:
                local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            local.conn.request("POST", "/webhooks/stripe", body.encode(),
                               {"Stripe-Signature": f"t={t},v1={signature}", "Content-Type": "application/json"})
            response = local.conn.getresponse()
            status, answer = str(response.status), response.read()
        except (OSError, http.client.HTTPException):
            local.conn, status, answer = None, "error", b""
        with lock:
            statuses[status] += 1
        if status.startswith("2"):
            with lock:
                outcomes[json.loads(answer).get("outcome", "unknown")] += 1
            return
        if status != "error" and not status.startswith("5"):
            break
        time.sleep(wait)
        wait = min(wait * 2, 1.0)
    with lock:
        gave_up += 1
started = time.monotonic()
with ThreadPoolExecutor(concurrency) as pool:
    list(pool.map(post, (body for body in bodies for _ in range(copies))))
print(json.dumps({"sent": sum(statuses.values()), "statuses": dict(statuses), "outcomes": dict(outcomes),
                  "gave_up": gave_up, "seconds": round(time.monotonic() - started, 1)}))
PY
    local deliverer=$!
    pids+=("$deliverer")
    wait "$deliverer" || true
}

field() { json_field "$1" "d.get('$2')"; } # field JSON NAME

# webhookd sweep stripe against the fake on API_PORT; prints its JSON line
# (the last on stdout: log lines, such as its warning, come before it).
sweep_stripe() { # sweep_stripe DB_URL API_PORT KEY [sweep args...]
    local db_url=$1 api_port=$2 key=$3 database; shift 3
    mapfile -t database < <(app_env "$db_url")
    env "${database[@]}" STRIPE_API_KEY=$key WEBHOOKD_STRIPE_API_BASE="http://127.0.0.1:$api_port" \
        WEBHOOKD_LOG_FORMAT=json RUST_LOG=warn "$binary" sweep stripe "$@" > "$scratch/sweep.out" 2>&1 \
        || { cat "$scratch/sweep.out" >> "$scratch/sweep.log"; return 1; }
    cat "$scratch/sweep.out" >> "$scratch/sweep.log"
    tail -n 1 "$scratch/sweep.out"
}

# 1. Crash loop: SIGKILL every few seconds while a drill with duplicates runs.
crash_loop() {
    local events=${1:-5000} max_kills=${2:-1000}
    local db port sink_port file started kills=0 out
    db=$(DATABASE_URL=$admin_url bench_database chaos_crash)
    DATABASE_URL=$db "$binary" migrate >/dev/null 2>&1
    port=$(free_port 18480); sink_port=$(free_port 18580); file=$scratch/crash.ids
    start_sink "$sink_port" "$file"
    serve "$db" "$port" "$sink_port"
    started=$(date +%s)
    drill "$db" --url "http://127.0.0.1:$port" --events "$events" --duplicates 5 --concurrency 8 \
        > "$scratch/crash.json" &
    local drill_pid=$!
    pids+=("$drill_pid")
    # Kill every 0.5 to 2 s while the drill runs and while rows wait for
    # delivery (the drainer dies mid-delivery too), at most 3 minutes.
    pending() { [ "$(psql_at "$db" "select count(*) from outbox where delivered_at is null")" != 0 ]; }
    while { kill -0 "$drill_pid" 2>/dev/null || pending; } && [ "$kills" -lt "$max_kills" ] \
        && [ "$(( $(date +%s) - started ))" -lt 180 ]; do
        sleep "0.$(( 5 + RANDOM % 5 ))"
        [ "$(( RANDOM % 2 ))" = 0 ] || sleep 1
        kill -9 "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
        kills=$((kills + 1))
        serve "$db" "$port" "$sink_port"
    done
    wait "$drill_pid" || true
    out=$(cat "$scratch/crash.json")
    local drained=ok
    wait_drained "$db" 120 || drained=timeout
    local verified reconcile=ok duplicates statuses
    verified=$(json_field "$out" 'd["passed"]')
    duplicates=$(json_field "$out" 'd["outcomes"].get("duplicate", 0)')
    statuses=$(json_field "$out" 'd["statuses"]')
    reconciled "$db" || reconcile=FAILED
    read -r rows deliveries missing unknown dead < <(delivery_check "$db" "$file")
    local verdict=FAIL
    if [ "$kills" -ge 1 ] && [ "$verified" = True ] && [ "$reconcile" = ok ] && [ "$drained" = ok ] \
        && [ "$missing" = 0 ] && [ "$unknown" = 0 ] && [ "$dead" = 0 ] && no_500 "$out"; then verdict=PASS; fi
    report "$verdict" "crash loop: $events events x 5 copies, $kills SIGKILLs in $(( $(date +%s) - started )) s; statuses $statuses; duplicates absorbed $duplicates; drill verification $verified; reconcile $reconcile; outbox rows $rows, deliveries $deliveries, missing $missing, unknown ids $unknown, dead $dead, drained $drained"
    kill "$SERVER_PID" "$SINK_PID" 2>/dev/null; wait "$SERVER_PID" "$SINK_PID" 2>/dev/null || true
}

# 2. Database outage: Postgres stopped mid-load, started again.
db_outage() {
    local events=${1:-3000} outage=${2:-10}
    local db port sink_port file out
    db=$(DATABASE_URL=$admin_url bench_database chaos_outage)
    DATABASE_URL=$db "$binary" migrate >/dev/null 2>&1
    port=$(free_port 18480); sink_port=$(free_port 18580); file=$scratch/outage.ids
    start_sink "$sink_port" "$file"
    serve "$db" "$port" "$sink_port" WEBHOOKD_DB_ACQUIRE_TIMEOUT=1s
    drill "$db" --url "http://127.0.0.1:$port" --events "$events" --duplicates 2 --concurrency 16 \
        > "$scratch/outage.json" &
    local drill_pid=$!
    pids+=("$drill_pid")
    sleep 1
    as_pg_user "$PG_BINDIR/pg_ctl" -D "$PG_CLUSTER_DIR" -m fast -w stop >/dev/null
    local stopped_at probes=0 probe_2xx=0 probe_500=0 ready_2xx=0 readyz
    stopped_at=$(date +%s)
    # Fresh events during the outage: none may be answered 2xx.
    while [ "$(( $(date +%s) - stopped_at ))" -lt "$outage" ]; do
        probes=$((probes + 1))
        case "$(post_credit "$port" "evt_outage_$probes" outage_user 100)" in
            2*) probe_2xx=$((probe_2xx + 1)) ;;
            500) probe_500=$((probe_500 + 1)) ;;
        esac
        readyz=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/readyz" || echo 000)
        [ "$readyz" != 200 ] || ready_2xx=$((ready_2xx + 1))
        sleep 0.3
    done
    local restarted_at recovered=timeout
    restarted_at=$(date +%s%N)
    restart_cluster
    if wait_ready "$port" 60; then
        recovered=$(python3 -c "print(f'{($(date +%s%N) - $restarted_at) / 1e9:.1f} s')")
    fi
    # The provider retries the refused probes: each applies once.
    local retried=0
    for n in $(seq 1 "$probes"); do
        for _ in $(seq 1 20); do
            case "$(post_credit "$port" "evt_outage_$n" outage_user 100)" in 2*) retried=$((retried + 1)); break ;; esac
            sleep 0.2
        done
    done
    wait "$drill_pid" || true
    out=$(cat "$scratch/outage.json")
    local drained=ok reconcile=ok verified statuses balance
    wait_drained "$db" 120 || drained=timeout
    verified=$(json_field "$out" 'd["passed"]')
    statuses=$(json_field "$out" 'd["statuses"]')
    balance=$(psql_at "$db" "select coalesce(sum(balance_minor), 0) from wallets where user_id = 'outage_user'")
    reconciled "$db" || reconcile=FAILED
    read -r rows deliveries missing unknown dead < <(delivery_check "$db" "$file")
    local verdict=FAIL
    if [ "$verified" = True ] && [ "$reconcile" = ok ] && [ "$probe_2xx" = 0 ] && [ "$ready_2xx" = 0 ] \
        && no_500 "$out" && [ "$probe_500" = 0 ] \
        && [ "$retried" = "$probes" ] && [ "$balance" = "$((probes * 100))" ] && [ "$drained" = ok ] \
        && [ "$missing" = 0 ] && [ "$unknown" = 0 ]; then verdict=PASS; fi
    report "$verdict" "database outage: ${outage} s stopped under a $events-event drill; probes during the outage $probes, answered 2xx $probe_2xx, 500 $probe_500, /readyz 200 $ready_2xx; ready again $recovered after Postgres was started (webhookd not restarted); probes applied once on retry $retried/$probes (balance $balance); drill statuses $statuses, verification $verified; reconcile $reconcile; outbox rows $rows, missing $missing"
    kill "$SERVER_PID" "$SINK_PID" 2>/dev/null; wait "$SERVER_PID" "$SINK_PID" 2>/dev/null || true
}

# 3. Sink outage: the sink is down for 20 s, then comes back.
sink_outage() {
    local events=1000 outage=20 db port sink_port file started
    db=$(DATABASE_URL=$admin_url bench_database chaos_sink)
    DATABASE_URL=$db "$binary" migrate >/dev/null 2>&1
    port=$(free_port 18480); sink_port=$(free_port 18580); file=$scratch/sink.ids
    serve "$db" "$port" "$sink_port"
    started=$(date +%s)
    local out
    out=$(drill "$db" --url "http://127.0.0.1:$port" --events "$events" --concurrency 16)
    sleep "$(( outage - ($(date +%s) - started) > 0 ? outage - ($(date +%s) - started) : 0 ))"
    local failed_attempts
    failed_attempts=$(psql_at "$db" "select count(*) from outbox where attempts > 0 and delivered_at is null")
    start_sink "$sink_port" "$file"
    local back drained=ok
    back=$(date +%s)
    wait_drained "$db" 120 || drained=timeout
    local caught_up=$(( $(date +%s) - back ))
    read -r rows deliveries missing unknown dead < <(delivery_check "$db" "$file")
    local verdict=FAIL
    if [ "$(json_field "$out" 'd["passed"]')" = True ] && [ "$drained" = ok ] && [ "$dead" = 0 ] \
        && [ "$missing" = 0 ] && [ "$unknown" = 0 ]; then verdict=PASS; fi
    report "$verdict" "sink outage: ${outage} s down; $events credits, $failed_attempts rows had failed attempts; all delivered $caught_up s after the sink returned (drained $drained); outbox rows $rows, deliveries $deliveries, missing $missing, unknown ids $unknown, dead $dead"
    kill "$SERVER_PID" "$SINK_PID" 2>/dev/null; wait "$SERVER_PID" "$SINK_PID" 2>/dev/null || true
}

# 4. Lock contention: another session holds a hot wallet row past the
#    request timeout.
lock_contention() {
    local db port sink_port file timeout_s=2 hold_s=6
    db=$(DATABASE_URL=$admin_url bench_database chaos_lock)
    DATABASE_URL=$db "$binary" migrate >/dev/null 2>&1
    port=$(free_port 18480); sink_port=$(free_port 18580); file=$scratch/lock.ids
    start_sink "$sink_port" "$file"
    serve "$db" "$port" "$sink_port" WEBHOOKD_REQUEST_TIMEOUT=${timeout_s}s
    local seeded
    seeded=$(post_credit "$port" evt_lock_seed hot_user 100)
    "$PG_BINDIR/psql" -q -d "$db" -c "begin; select 1 from wallets where user_id = 'hot_user' for update; select pg_sleep($hold_s); commit;" >/dev/null &
    local holder=$!
    pids+=("$holder")
    for _ in $(seq 1 100); do
        [ "$(psql_at "$db" "select count(*) from pg_locks l join pg_class c on c.oid = l.relation where c.relname = 'wallets' and l.mode = 'RowShareLock' and l.granted")" = 0 ] || break
        sleep 0.05
    done
    local t0 hot other elapsed
    t0=$(date +%s%N)
    hot=$(post_credit "$port" evt_lock_hot hot_user 50)
    elapsed=$(python3 -c "print(f'{($(date +%s%N) - $t0) / 1e9:.2f}')")
    other=$(post_credit "$port" evt_lock_other other_user 70)
    wait "$holder" || true
    local retry recorded balance
    retry=$(post_credit "$port" evt_lock_hot hot_user 50)
    recorded=$(psql_at "$db" "select outcome from processed_events where event_id = 'evt_lock_hot'")
    balance=$(psql_at "$db" "select balance_minor from wallets where user_id = 'hot_user'")
    local verdict=FAIL
    if [ "$seeded" = 200 ] && [ "$hot" = 503 ] && python3 -c "import sys; sys.exit(0 if $elapsed < $timeout_s + 1 else 1)" \
        && [ "$other" = 200 ] && [ "$retry" = 200 ] && [ "$recorded" = processed ] && [ "$balance" = 150 ] \
        && reconciled "$db"; then verdict=PASS; fi
    report "$verdict" "lock contention: wallet row held ${hold_s} s, request timeout ${timeout_s} s; the hot credit answered $hot after $elapsed s; another wallet's credit meanwhile $other; the retry $retry ($recorded, balance $balance)"
    kill "$SERVER_PID" "$SINK_PID" 2>/dev/null; wait "$SERVER_PID" "$SINK_PID" 2>/dev/null || true
}

# 5. Two servers (each with its drainer) on one database, duplicate storms
#    sent to both.
two_servers() {
    local events=2000 db port_a port_b sink_port file out
    db=$(DATABASE_URL=$admin_url bench_database chaos_two)
    DATABASE_URL=$db "$binary" migrate >/dev/null 2>&1
    port_a=$(free_port 18480); sink_port=$(free_port 18580); file=$scratch/two.ids
    start_sink "$sink_port" "$file"
    serve "$db" "$port_a" "$sink_port"
    local server_a=$SERVER_PID
    port_b=$(free_port $((port_a + 1)))
    serve "$db" "$port_b" "$sink_port"
    out=$(drill "$db" --url "http://127.0.0.1:$port_a" --url "http://127.0.0.1:$port_b" \
        --events "$events" --duplicates 20 --concurrency 8)
    local drained=ok reconcile=ok
    wait_drained "$db" 120 || drained=timeout
    reconciled "$db" || reconcile=FAILED
    read -r rows deliveries missing unknown dead < <(delivery_check "$db" "$file")
    local verdict=FAIL
    if [ "$(json_field "$out" 'd["passed"]')" = True ] && [ "$reconcile" = ok ] && [ "$drained" = ok ] \
        && [ "$missing" = 0 ] && [ "$unknown" = 0 ] && [ "$dead" = 0 ]; then verdict=PASS; fi
    report "$verdict" "two servers: $events events x 20 copies over both; outcomes $(json_field "$out" 'd["outcomes"]'); verification $(json_field "$out" 'd["passed"]'); reconcile $reconcile; outbox rows $rows, deliveries $deliveries, missing $missing, unknown ids $unknown"
    kill "$server_a" "$SERVER_PID" "$SINK_PID" 2>/dev/null; wait "$server_a" "$SERVER_PID" "$SINK_PID" 2>/dev/null || true
}

# 6. Lost webhooks: the provider gives up on a contiguous stretch of
#    deliveries; a sweep of its Events API applies exactly those.
lost_webhooks() {
    local events=${1:-2000} db port sink_port api_port file key=sk_test_chaos_sweep
    db=$(DATABASE_URL=$admin_url bench_database chaos_lost)
    DATABASE_URL=$db "$binary" migrate >/dev/null 2>&1
    port=$(free_port 18480); sink_port=$(free_port 18580); api_port=$(free_port 18680); file=$scratch/lost.ids
    start_sink "$sink_port" "$file"
    serve "$db" "$port" "$sink_port"
    # The provider holds every event (FILE), created over the last 30
    # minutes; 30% in the middle (by time) are never delivered. FILE also
    # holds events the sweep must not list: other types, and older ones.
    local expected dropped
    read -r expected dropped < <(python3 - "$events" "$scratch/lost" <<'PY'
import json, random, sys, time
n, out = int(sys.argv[1]), sys.argv[2]
now, rng = int(time.time()), random.Random(7)
def event(i, created, kind="payment_intent.succeeded", prefix="evt_lost_"):
    amount = 100 + i % 900
    return {"id": f"{prefix}{i:06d}", "object": "event", "api_version": "2024-06-20", "created": created,
            "data": {"object": {"id": f"pi_{prefix[4:]}{i:06d}", "object": "payment_intent", "amount": amount,
                                "amount_received": amount, "currency": "usd",
                                "metadata": {"user_id": f"lost_user_{i % 16}"}}},
            "livemode": False, "pending_webhooks": 1, "type": kind}
credits = [event(i, now - 1800 + i * 1740 // n) for i in range(n)]
start, stop = int(n * 0.35), int(n * 0.35) + int(n * 0.30)
others = [event(i, now - 1800 + i * 30, "product.created", "evt_other_") for i in range(50)]
old = [event(i, now - 7200 + i, prefix="evt_old_") for i in range(50)]
held = credits + others + old
rng.shuffle(held)
with open(out + ".api.tmp", "w") as f:
    f.writelines(json.dumps(e) + "\n" for e in held)
on_time = credits[:start] + credits[stop:]
rng.shuffle(on_time)
with open(out + ".on-time", "w") as f:
    f.writelines(json.dumps(e) + "\n" for e in on_time)
with open(out + ".late", "w") as f:
    f.writelines(json.dumps(e) + "\n" for e in credits[start:stop])
with open(out + ".expected", "w") as f:
    f.writelines(e["id"] + "\n" for e in credits)
print(sum(e["data"]["object"]["amount"] for e in credits), stop - start)
PY
)
    mv "$scratch/lost.api.tmp" "$scratch/lost.api"
    start_fake_stripe "$api_port" "$key" "$scratch/lost.api"
    local rest=$(( events - dropped ))
    # The rest, each 3 times at once, 16 requests in flight.
    local on_time late
    deliver "$port" "$scratch/lost.on-time" 3 16 "$scratch/lost.on-time.json"
    on_time=$(cat "$scratch/lost.on-time.json")
    # A wrong key is refused and writes nothing; a dry run counts.
    local refused=no before dry
    before=$(psql_at "$db" "select count(*) from processed_events")
    sweep_stripe "$db" "$api_port" sk_test_wrong_key --since 1h >/dev/null || refused=yes
    [ "$(psql_at "$db" "select count(*) from processed_events")" = "$before" ] || refused="no (it wrote)"
    dry=$(sweep_stripe "$db" "$api_port" "$key" --since 1h --dry-run || echo '{}')
    local t0 swept sweep_s
    t0=$(date +%s%N)
    swept=$(sweep_stripe "$db" "$api_port" "$key" --since 1h || echo '{}')
    sweep_s=$(python3 -c "print(f'{($(date +%s%N) - $t0) / 1e9:.1f}')")
    # The provider delivers the dropped stretch late after all, twice each.
    deliver "$port" "$scratch/lost.late" 2 16 "$scratch/lost.late.json"
    late=$(cat "$scratch/lost.late.json")
    local again
    again=$(sweep_stripe "$db" "$api_port" "$key" --since 1h || echo '{}')
    local drained=ok reconcile=ok
    wait_drained "$db" 120 || drained=timeout
    reconciled "$db" || reconcile=FAILED
    # One ledger entry for each credit the provider holds, none for others.
    psql_at "$db" "select event_id, count(*) from wallet_entries group by event_id" > "$scratch/lost.entries"
    local missing_entries doubled strays
    read -r missing_entries doubled strays < <(python3 - "$scratch/lost.expected" "$scratch/lost.entries" <<'PY'
import sys
expected = set(open(sys.argv[1]).read().split())
entries = dict(line.split("|") for line in open(sys.argv[2]).read().split())
print(len(expected - entries.keys()), sum(1 for e in expected if int(entries.get(e, 0)) > 1), len(entries.keys() - expected))
PY
)
    local total via_webhook via_sweep
    total=$(psql_at "$db" "select coalesce(sum(balance_minor), 0) from wallets")
    via_webhook=$(psql_at "$db" "select count(*) from processed_events where received_via = 'webhook'")
    via_sweep=$(psql_at "$db" "select count(*) from processed_events where received_via = 'sweep'")
    read -r rows deliveries missing unknown dead < <(delivery_check "$db" "$file")
    local verdict=FAIL
    if [ "$(field "$swept" recovered)" = "$dropped" ] && [ "$(field "$swept" already_seen)" = "$rest" ] \
        && [ "$(field "$swept" listed)" = "$events" ] && [ "$(field "$swept" skipped)" = 0 ] \
        && [ "$(field "$dry" recovered)" = "$dropped" ] && [ "$refused" = yes ] \
        && [ "$(json_field "$on_time" "d['outcomes'] == {'processed': $rest, 'duplicate': $((rest * 2))}")" = True ] \
        && [ "$(json_field "$late" "d['outcomes'] == {'duplicate': $((dropped * 2))}")" = True ] \
        && [ "$(field "$again" recovered)" = 0 ] && [ "$(field "$again" already_seen)" = "$events" ] \
        && [ "$missing_entries" = 0 ] && [ "$doubled" = 0 ] && [ "$strays" = 0 ] && [ "$total" = "$expected" ] \
        && [ "$via_webhook" = "$rest" ] && [ "$via_sweep" = "$dropped" ] && [ "$reconcile" = ok ] \
        && [ "$drained" = ok ] && [ "$rows" = "$events" ] && [ "$missing" = 0 ] && [ "$unknown" = 0 ] \
        && [ "$dead" = 0 ] && no_500 "$on_time" && no_500 "$late"; then verdict=PASS; fi
    report "$verdict" "lost webhooks: $events credits, $dropped (a contiguous 30%) never delivered, the rest x 3 copies (outcomes $(json_field "$on_time" 'd["outcomes"]')); sweep listed $(field "$swept" listed) in $sweep_s s ($(field "$swept" pages) pages, $(field "$swept" requests) requests): recovered $(field "$swept" recovered), already seen $(field "$swept" already_seen) (dry run first: $(field "$dry" recovered); a wrong key refused: $refused); the dropped stretch delivered late x 2: $(json_field "$late" 'd["outcomes"]'); a second sweep recovered $(field "$again" recovered); ledger entries missing $missing_entries, doubled $doubled, strays $strays; wallet total $total of $expected; received via webhook $via_webhook, sweep $via_sweep; reconcile $reconcile; outbox rows $rows, missing $missing, unknown ids $unknown, dead $dead"
    kill "$SERVER_PID" "$SINK_PID" "$FAKE_PID" 2>/dev/null; wait "$SERVER_PID" "$SINK_PID" "$FAKE_PID" 2>/dev/null || true
}

# 7. The restore drill: the database is restored from a backup taken before
#    the last events arrived, and forgets them; a sweep reaching back past
#    the backup applies them again, exactly once.
restore_drill() {
    local before=${1:-300} after=${2:-600} late=5 retried=10
    local db port sink_port api_port file messages key=sk_test_chaos_restore name=chaos_restore
    db=$(DATABASE_URL=$admin_url bench_database "$name")
    DATABASE_URL=$db "$binary" migrate >/dev/null 2>&1
    port=$(free_port 18480); sink_port=$(free_port 18580); api_port=$(free_port 18680)
    file=$scratch/restore.ids; messages=$scratch/restore.messages
    # The sink is down until the backup is taken: the backup holds every
    # outbox row of the events before it undelivered.
    serve "$db" "$port" "$sink_port"
    # The provider's events (restore.api: its truth, which its Events API
    # lists). Before the backup: BEFORE credits of 16 users created over the
    # last hour, delivered; LATE credits created 40 minutes ago whose
    # deliveries fail until after the backup (a provider retries for days),
    # and their refunds, delivered: they wait in deferred_events. After the
    # backup: AFTER events, the late credits among them; the others, created
    # after the backup, are new credits of the same users, refunds of credits
    # from before the backup and refunds of new credits.
    cat > "$scratch/restore-events.py" <<'PY'
import json, random, sys, time
phase, out = sys.argv[1], sys.argv[2]
rng = random.Random(11)
def event(kind, eid, created, obj):
    return {"id": eid, "object": "event", "api_version": "2024-06-20", "created": created,
            "data": {"object": obj}, "livemode": False, "pending_webhooks": 1, "type": kind}
def credit(name, user, amount, created):
    return event("payment_intent.succeeded", "evt_" + name, created,
                 {"id": "pi_" + name, "object": "payment_intent", "amount": amount, "amount_received": amount,
                  "currency": "usd", "status": "succeeded", "metadata": {"user_id": user}})
def refund(name, of, created):
    paid = of["data"]["object"]
    return event("charge.refunded", "evt_" + name, created,
                 {"id": "ch_" + paid["id"][3:], "object": "charge", "amount": paid["amount"],
                  "amount_captured": paid["amount"], "amount_refunded": paid["amount"] // 2,
                  "refunded": False, "currency": "usd", "payment_intent": paid["id"],
                  "status": "succeeded", "metadata": paid["metadata"]})
def write(path, events, mode="w"):
    with open(path, mode) as f:
        f.writelines(json.dumps(e) + "\n" for e in events)
def read(path):
    return [json.loads(line) for line in open(path) if line.strip()]
if phase == "before":
    n, late = int(sys.argv[3]), int(sys.argv[4])
    now = int(time.time())
    credits = [credit(f"restore_b_{i:06d}", f"restore_user_{i % 16}", 100 + i * 37 % 900,
                      now - 3600 + i * 3000 // n) for i in range(n)]
    lates = [credit(f"restore_l_{i:06d}", f"restore_user_{i % 16}", 500 + i, now - 2400 + i) for i in range(late)]
    late_refunds = [refund(f"restore_lr_{i:06d}", c, now - 1200 + i) for i, c in enumerate(lates)]
    write(out + ".late", lates)
    write(out + ".before", rng.sample(credits + late_refunds, n + late))
    write(out + ".api", rng.sample(credits + lates + late_refunds, n + 2 * late))
elif phase == "after":
    n, backup_at, retried = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    lates = read(out + ".late")
    earlier = sorted((e for e in read(out + ".api") if e["id"].startswith("evt_restore_b_")), key=lambda e: e["id"])
    t = max(int(time.time()), backup_at)
    r = n // 10
    new = [credit(f"restore_a_{i:06d}", f"restore_user_{(i * 7 + 3) % 16}", 100 + i * 53 % 900, t)
           for i in range(n - len(lates) - 2 * r)]
    # A second later than the credits: a sweep applies them after these.
    refunds = [refund(f"restore_br_{i:06d}", c, t + 1) for i, c in enumerate(rng.sample(earlier, r))]
    refunds += [refund(f"restore_ar_{i:06d}", c, t + 1) for i, c in enumerate(rng.sample(new, r))]
    write(out + ".api", new + refunds, "a")
    write(out + ".after", rng.sample(lates + new + refunds, n))
    write(out + ".retried", new[:retried])
else:
    # check: what the database holds against the provider's truth. Prints
    # "events missing doubled strays, entries missing doubled strays,
    # users wrong of users, expected total".
    def counts(path):
        return dict((k, int(v)) for k, v in (line.rsplit("|", 1) for line in open(path).read().split()))
    truth = read(out + ".api")
    ids = {e["id"] for e in truth}
    owed = {}
    for e in truth:
        paid = e["data"]["object"]
        user = paid["metadata"]["user_id"]
        owed[user] = owed.get(user, 0) + (paid["amount_received"] if e["type"] == "payment_intent.succeeded"
                                          else -paid["amount_refunded"])
    events, entries, wallets = counts(out + ".events"), counts(out + ".entries"), counts(out + ".wallets")
    def judge(held):
        return (len(ids - held.keys()), sum(1 for v in held.values() if v > 1), len(held.keys() - ids))
    wrong = sum(1 for user in owed.keys() | wallets.keys() if owed.get(user) != wallets.get(user))
    print(*judge(events), *judge(entries), wrong, len(owed), sum(owed.values()))
PY
    local first
    python3 "$scratch/restore-events.py" before "$scratch/restore" "$before" "$late"
    start_fake_stripe "$api_port" "$key" "$scratch/restore.api"
    deliver "$port" "$scratch/restore.before" 1 16 "$scratch/restore.before.json"
    first=$(cat "$scratch/restore.before.json")
    # The backup: pg_dump while webhookd serves.
    local backup_at at_backup rows_at_backup undelivered_at_backup
    at_backup=$(psql_at "$db" "select (select count(*) from processed_events) || ' ' || (select count(*) from deferred_events) || ' ' || (select coalesce(sum(balance_minor), 0) from wallets)")
    rows_at_backup=$(psql_at "$db" "select count(*) from outbox")
    undelivered_at_backup=$(psql_at "$db" "select count(*) from outbox where delivered_at is null")
    backup_at=$(date +%s)
    "$PG_BINDIR/pg_dump" -Fc -f "$scratch/restore.dump" -d "$db"
    start_sink "$sink_port" "$file" "$messages"
    python3 "$scratch/restore-events.py" after "$scratch/restore" "$after" "$backup_at" "$retried"
    local second
    deliver "$port" "$scratch/restore.after" 2 16 "$scratch/restore.after.json"
    second=$(cat "$scratch/restore.after.json")
    # The sink receives every row before the restore.
    local drained=ok
    wait_drained "$db" 60 || drained=timeout
    # The restore: webhookd stopped (SIGTERM: it finishes what it began),
    # the database dropped and made anew, the backup restored into it, all
    # on Postgres itself (never through a pooler).
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    local received_before connected restored
    received_before=$(wc -l < "$messages")
    # Nothing of webhookd's may still be connected (its backends end a moment
    # after it exits); PgBouncer's idle server connections end with the drop.
    local sessions="select count(*) from pg_stat_activity where datname = '$name'"
    if [ -z "$pooler" ]; then
        for _ in $(seq 1 100); do [ "$(psql_at "$admin_url" "$sessions")" = 0 ] && break; sleep 0.1; done
    fi
    connected=$(psql_at "$admin_url" "$sessions")
    local left="$connected connections left"
    [ -z "$pooler" ] || left="$connected sessions left, PgBouncer's among them, ended by the drop"
    "$PG_BINDIR/psql" -q -v ON_ERROR_STOP=1 -d "$admin_url" \
        -c "drop database $name with (force)" -c "create database $name" >/dev/null
    "$PG_BINDIR/pg_restore" --exit-on-error -d "$db" "$scratch/restore.dump"
    # Nothing moves the outbox's ids on here: webhookd does at start
    # (ids_past_now), and the check below counts any id handed out again.
    restored=$(psql_at "$db" "select (select count(*) from processed_events) || ' ' || (select count(*) from deferred_events) || ' ' || (select coalesce(sum(balance_minor), 0) from wallets)")
    local forgotten
    psql_at "$db" "select event_id from processed_events" > "$scratch/restore.restored"
    forgotten=$(python3 -c 'import json, sys
kept = set(open(sys.argv[2]).read().split())
print(sum(1 for line in open(sys.argv[1]) if line.strip() and json.loads(line)["id"] not in kept))' \
        "$scratch/restore.after" "$scratch/restore.restored")
    # webhookd again (the restored database is migrated as far as the
    # backup was); the provider's retries of a few forgotten events reach it
    # before any sweep.
    serve "$db" "$port" "$sink_port"
    local retries
    deliver "$port" "$scratch/restore.retried" 2 4 "$scratch/restore.retried.json"
    retries=$(cat "$scratch/restore.retried.json")
    # A sweep reaching back only to the backup misses the late credits
    # (created before it); one reaching back past it by the provider's
    # retry period (3 days) finds everything, and a second one nothing.
    local short_since since dry swept again
    short_since=$(( $(date +%s) - backup_at + 60 ))s
    since=$(( $(date +%s) - backup_at + 3 * 86400 ))s
    dry=$(sweep_stripe "$db" "$api_port" "$key" --since "$short_since" --dry-run || echo '{}')
    swept=$(sweep_stripe "$db" "$api_port" "$key" --since "$since" || echo '{}')
    again=$(sweep_stripe "$db" "$api_port" "$key" --since "$since" || echo '{}')
    # The provider's retries of every forgotten event, after the sweep.
    local late_copies
    deliver "$port" "$scratch/restore.after" 1 16 "$scratch/restore.late.json"
    late_copies=$(cat "$scratch/restore.late.json")
    wait_drained "$db" 60 || drained=timeout
    local reconcile=ok
    reconciled "$db" || reconcile=FAILED
    psql_at "$db" "select event_id, count(*) from processed_events where provider = 'stripe' group by event_id" > "$scratch/restore.events"
    psql_at "$db" "select event_id, count(*) from wallet_entries group by event_id" > "$scratch/restore.entries"
    psql_at "$db" "select user_id, sum(balance_minor) from wallets group by user_id" > "$scratch/restore.wallets"
    local missing_events doubled_events stray_events missing_entries doubled_entries stray_entries wrong users owed waiting
    read -r missing_events doubled_events stray_events missing_entries doubled_entries stray_entries wrong users owed \
        < <(python3 "$scratch/restore-events.py" check "$scratch/restore")
    waiting=$(psql_at "$db" "select count(*) from deferred_events")
    # What the sink received after the restore: messages (topic, event)
    # again under a new webhook-id, webhook-ids it had received before for
    # another message, and messages again under the same webhook-id (rows
    # delivered after the backup, which the restore made pending again).
    local renamed reused same
    read -r renamed reused same < <(python3 - "$messages" "$received_before" <<'PY'
import sys
lines = [line.split() for line in open(sys.argv[1]) if line.strip()]
k = int(sys.argv[2])
ids_before, message_ids_before = {}, {}
for webhook_id, topic, event in lines[:k]:
    ids_before.setdefault(webhook_id, set()).add((topic, event))
    message_ids_before.setdefault((topic, event), set()).add(webhook_id)
renamed, reused, same = set(), set(), set()
for webhook_id, topic, event in lines[k:]:
    if (topic, event) in message_ids_before and webhook_id not in message_ids_before[(topic, event)]:
        renamed.add((topic, event))
    if webhook_id in ids_before and (topic, event) not in ids_before[webhook_id]:
        reused.add((topic, event))
    if webhook_id in ids_before and (topic, event) in ids_before[webhook_id]:
        same.add(webhook_id)
print(len(renamed), len(reused), len(same))
PY
)
    read -r rows deliveries missing unknown dead < <(delivery_check "$db" "$file")
    local total=$(( before + late + after )) seen_before=$(( before + late + retried ))
    local verdict=FAIL
    if [ "$restored" = "$at_backup" ] && [ "$forgotten" = "$after" ] && { [ -n "$pooler" ] || [ "$connected" = 0 ]; } \
        && [ "$(json_field "$first" "d['outcomes'] == {'processed': $before, 'deferred': $late}")" = True ] \
        && [ "$(json_field "$second" "d['outcomes'].get('duplicate') == $after and sum(d['outcomes'].values()) == $((2 * after))")" = True ] \
        && [ "$(json_field "$retries" "d['outcomes'] == {'processed': $retried, 'duplicate': $retried}")" = True ] \
        && [ "$(field "$dry" recovered)" = "$(( after - late - retried ))" ] \
        && [ "$(field "$swept" recovered)" = "$(( after - retried ))" ] && [ "$(field "$swept" listed)" = "$total" ] \
        && [ "$(field "$swept" already_seen)" = "$seen_before" ] && [ "$(field "$swept" skipped)" = 0 ] \
        && [ "$(field "$swept" ignored)" = 0 ] && [ "$(field "$swept" deferred)" = 0 ] \
        && [ "$(field "$again" recovered)" = 0 ] && [ "$(field "$again" already_seen)" = "$total" ] \
        && [ "$(json_field "$late_copies" "d['outcomes'] == {'duplicate': $after}")" = True ] \
        && [ "$missing_events" = 0 ] && [ "$doubled_events" = 0 ] && [ "$stray_events" = 0 ] \
        && [ "$missing_entries" = 0 ] && [ "$doubled_entries" = 0 ] && [ "$stray_entries" = 0 ] \
        && [ "$wrong" = 0 ] && [ "$waiting" = 0 ] && [ "$reconcile" = ok ] && [ "$drained" = ok ] \
        && [ "$missing" = 0 ] && [ "$dead" = 0 ] && [ "$renamed" = "$(( rows - rows_at_backup ))" ] && [ "$reused" = 0 ] \
        && [ "$undelivered_at_backup" = "$rows_at_backup" ] && [ "$same" = "$rows_at_backup" ] \
        && no_500 "$first" && no_500 "$second" && no_500 "$retries" && no_500 "$late_copies"; then verdict=PASS; fi
    report "$verdict" "restore drill: $before credits and $late refunds waiting for their credits, then a pg_dump; $after events after it ($late of them credits created before it), x 2 copies: $(json_field "$second" 'd["outcomes"]'); webhookd stopped, the database dropped ($left) and restored: $forgotten of $after forgotten, events, deferred and wallet total as at the backup ($restored); webhookd started, $retried forgotten events retried by the provider: $(json_field "$retries" 'd["outcomes"]'); a dry run reaching back only to the backup counted $(field "$dry" recovered); the sweep (--since $since: the backup's age and 72 h) listed $(field "$swept" listed): recovered $(field "$swept" recovered), already seen $(field "$swept" already_seen); a second sweep recovered $(field "$again" recovered); every forgotten event redelivered: $(json_field "$late_copies" 'd["outcomes"]'); events missing $missing_events, doubled $doubled_events, strays $stray_events; ledger entries missing $missing_entries, doubled $doubled_entries, strays $stray_entries; wrong balances $wrong of $users users (total $owed); deferred left $waiting; reconcile $reconcile; outbox rows $rows, missing $missing, dead $dead; after the restore the sink got $renamed messages again under new webhook-ids, $reused under an id it had received for another message, $same again under the same webhook-id (of the $undelivered_at_backup rows the backup held undelivered)"
    kill "$SERVER_PID" "$SINK_PID" "$FAKE_PID" 2>/dev/null; wait "$SERVER_PID" "$SINK_PID" "$FAKE_PID" 2>/dev/null || true
}

began=$(date +%s)
if [ -n "$short" ]; then
    crash_loop 600 1
    db_outage 2000 4
    lost_webhooks 1000
    restore_drill 100 200
else
    crash_loop
    db_outage
    sink_outage
    lock_contention
    two_servers
    lost_webhooks 2000
    restore_drill 300 600
fi
printf '\n'
for line in "${results[@]}"; do printf '%s\n' "$line"; done
printf '%s scenario(s) failed; %s s\n' "$failures" "$(( $(date +%s) - began ))"
[ "$failures" = 0 ]
