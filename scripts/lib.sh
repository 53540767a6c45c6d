# Shared by scripts/run.sh and scripts/test.sh: find or start a Postgres.
# Sourced, not executed.

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

require_cargo() {
    command -v cargo >/dev/null 2>&1 || die "cargo is not installed; install Rust with rustup (https://rustup.rs) and rerun"
}

# apt_install WHAT PACKAGE...: installs Debian's PACKAGEs (as root, else
# with sudo -n), or dies saying that WHAT needs them.
apt_install() {
    local what=$1 sudo=""
    shift
    if [ "$(id -u)" -ne 0 ]; then
        sudo -n true 2>/dev/null || die "$what: install $* (Debian) or run as root"
        sudo="sudo -n"
    fi
    command -v apt-get >/dev/null 2>&1 || die "$what: install $* (Debian packages)"
    log "installing $* (Debian packages)"
    $sudo apt-get update -qq >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2 \
        || die "could not install $*"
}

# Chromium and chromedriver, for the console's browser test: installs
# Debian's packages when either is missing.
require_browser() {
    command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 && return 0
    apt_install "Chromium and chromedriver are needed for the browser test" chromium chromium-driver
    command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 \
        || die "chromium chromium-driver installed, yet chromium or chromedriver is not on PATH"
}

# promtool, for the tests of the shipped alerting rules: installs Debian's
# prometheus package when it is missing. On a host that runs services the
# package also starts a Prometheus on :9090, the admin listener's default
# port: only promtool is used (`systemctl disable --now prometheus`).
require_promtool() {
    command -v promtool >/dev/null 2>&1 && return 0
    apt_install "promtool is needed to check the alerting rules" prometheus
    command -v promtool >/dev/null 2>&1 || die "prometheus installed, yet promtool is not on PATH"
}

# The brokers the sink tests deliver to: nats-server (each test starts its
# own) and RabbitMQ on 127.0.0.1:5672 with guest/guest, which one test
# restarts with rabbitmqctl. Installs Debian's packages when missing and
# starts RabbitMQ when nothing listens on its port (as root, else with
# sudo -n).
require_brokers() {
    local sudo="" missing=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo -n true 2>/dev/null \
            || die "the broker tests need nats-server and a RabbitMQ they may restart: run as root, or with sudo"
        sudo="sudo -n"
    fi
    command -v nats-server >/dev/null 2>&1 || missing="nats-server"
    command -v rabbitmqctl >/dev/null 2>&1 || missing="$missing rabbitmq-server"
    if [ -n "$missing" ]; then
        command -v apt-get >/dev/null 2>&1 || die "the broker tests need$missing (Debian packages)"
        log "installing$missing (Debian packages)"
        # shellcheck disable=SC2086
        $sudo apt-get update -qq >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >&2 \
            || die "could not install$missing"
    fi
    if ! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
        log "starting RabbitMQ"
        $sudo service rabbitmq-server start >&2 2>&1 || $sudo rabbitmq-server -detached >&2 \
            || die "could not start RabbitMQ"
    fi
    $sudo timeout 120 rabbitmqctl await_startup >/dev/null 2>&1 \
        || die "RabbitMQ did not start (rabbitmqctl await_startup)"
    export WEBHOOKD_RABBITMQCTL="${sudo:+$sudo }rabbitmqctl"
}

# Directory holding initdb, pg_ctl and postgres; installs Debian's
# PostgreSQL server package when none is present and we are root.
pg_bindir() {
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$dir" ] && command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
        dir=$(pg_config --bindir)
    fi
    if [ -z "$dir" ] && command -v initdb >/dev/null 2>&1; then
        dir=$(dirname "$(command -v initdb)")
    fi
    if [ -z "$dir" ]; then
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
            log "installing PostgreSQL (Debian package)"
            apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2 \
                || die "could not install PostgreSQL"
            dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
        fi
    fi
    [ -n "$dir" ] || die "PostgreSQL server binaries (initdb, pg_ctl) not found: install PostgreSQL or set DATABASE_URL"
    printf '%s\n' "$dir"
}

# Postgres refuses to run as root: as root, run the cluster as an
# unprivileged user (Debian's `postgres`, else a `webhookd` system user).
pg_user() {
    if [ "$(id -u)" -ne 0 ]; then
        id -un
    elif id postgres >/dev/null 2>&1; then
        echo postgres
    else
        id webhookd >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin webhookd
        echo webhookd
    fi
}

as_pg_user() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u "$PG_USER" -- "$@"
    else
        "$@"
    fi
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
    local port=${1:-25432}
    while port_in_use "$port"; do port=$((port + 1)); done
    echo "$port"
}

# start_cluster DATADIR [extra postgres -c settings...]
# Initialises DATADIR if needed, starts Postgres on a free loopback port and
# exports DATABASE_URL and PG_CLUSTER_DIR. Stop it with stop_cluster.
start_cluster() {
    local datadir=$1; shift
    local bindir port settings=""
    bindir=$(pg_bindir)
    PG_USER=$(pg_user)
    PG_BINDIR=$bindir
    mkdir -p "$datadir"
    if [ "$(id -u)" -eq 0 ]; then chown "$PG_USER" "$datadir"; fi
    chmod 700 "$datadir"
    if [ ! -f "$datadir/PG_VERSION" ]; then
        log "initialising a Postgres cluster in $datadir"
        as_pg_user "$bindir/initdb" -D "$datadir" -U postgres --auth=trust -E UTF8 --no-locale >/dev/null \
            || die "initdb failed"
    fi
    for setting in "$@"; do settings="$settings -c $setting"; done
    # The default port lies below the kernel's ephemeral range, so no client
    # socket of a test can be holding it; a port taken between the check and
    # the bind is skipped, a few times, before giving up.
    port=$(free_port "${WEBHOOKD_PG_PORT:-25432}")
    local attempt
    for attempt in 1 2 3 4 5 6 7 8; do
        rm -f "$datadir/server.log"
        if as_pg_user "$bindir/pg_ctl" -D "$datadir" -l "$datadir/server.log" -w -t 60 \
            -o "-p $port -k $datadir -c listen_addresses=127.0.0.1 $settings" start >/dev/null; then
            break
        fi
        if [ "$attempt" -lt 8 ] && grep -q "could not create any TCP/IP sockets" "$datadir/server.log"; then
            port=$(free_port $((port + 1)))
            continue
        fi
        cat "$datadir/server.log" >&2
        die "Postgres did not start"
    done
    PG_CLUSTER_DIR=$datadir
    PG_CLUSTER_OPTIONS="-p $port -k $datadir -c listen_addresses=127.0.0.1 $settings"
    export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
    log "Postgres is running: DATABASE_URL=$DATABASE_URL"
}

# Starts the cluster of start_cluster again, as it was, after a stop.
restart_cluster() {
    as_pg_user "$PG_BINDIR/pg_ctl" -D "$PG_CLUSTER_DIR" -l "$PG_CLUSTER_DIR/server.log" -w -t 60 \
        -o "$PG_CLUSTER_OPTIONS" start >/dev/null \
        || { tail -n 20 "$PG_CLUSTER_DIR/server.log" >&2; die "Postgres did not start again"; }
}

stop_cluster() {
    if [ -n "${PG_CLUSTER_DIR:-}" ] && [ -f "$PG_CLUSTER_DIR/postmaster.pid" ]; then
        as_pg_user "$PG_BINDIR/pg_ctl" -D "$PG_CLUSTER_DIR" -m fast -w stop >/dev/null 2>&1 || true
    fi
}

# Fails with a clear message when DATABASE_URL does not answer.
check_database_url() {
    local bindir
    bindir=$(pg_bindir)
    "$bindir/pg_isready" -q -t 10 -d "$DATABASE_URL" \
        || die "DATABASE_URL is set but that database does not answer"
}

# bench_setup NAME [postgres -c settings...]: for a benchmark script, a
# scratch directory ($scratch), a Postgres (DATABASE_URL's, else a throwaway
# cluster with the settings), a fresh database NAME ($db_url), and the
# release binary ($binary; WEBHOOKD_BIN=path uses that one instead),
# migrated; all removed again on exit.
bench_setup() {
    BENCH_DB=$1; shift
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/$BENCH_DB.XXXXXX")
    chmod 755 "$scratch"
    trap bench_cleanup EXIT
    PG_BINDIR=$(pg_bindir)
    if [ -z "${DATABASE_URL:-}" ]; then start_cluster "$scratch/data" "$@"; fi
    db_url=$(bench_database "$BENCH_DB")
    release_binary
    DATABASE_URL=$db_url "$binary" migrate
}

# Sets $binary: WEBHOOKD_BIN when given, else a release build.
release_binary() {
    if [ -n "${WEBHOOKD_BIN:-}" ]; then
        [ -x "$WEBHOOKD_BIN" ] || die "WEBHOOKD_BIN=$WEBHOOKD_BIN is not an executable"
        binary=$WEBHOOKD_BIN
    else
        require_cargo
        log "building (release)"
        SQLX_OFFLINE=true cargo build --locked --release --bin webhookd
        binary=${CARGO_TARGET_DIR:-target}/release/webhookd
    fi
}

bench_cleanup() {
    set +e
    if [ -n "${WEBHOOKD_PID:-}" ]; then kill "$WEBHOOKD_PID" 2>/dev/null; wait "$WEBHOOKD_PID" 2>/dev/null; fi
    for pid in ${BENCH_PIDS:-}; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
    stop_pgbouncer
    for name in ${BENCH_EXTRA_DBS:-}; do drop_bench_database "$name"; done
    if [ -n "${db_url:-}" ]; then drop_bench_database "$BENCH_DB"; fi
    stop_cluster
    rm -rf "$scratch"
}

# bench_database NAME: (re)creates database NAME on DATABASE_URL's server
# and prints its URL. Drop it with drop_bench_database NAME.
bench_database() {
    "$PG_BINDIR/psql" -q -d "$DATABASE_URL" -c "drop database if exists $1 with (force)" -c "create database $1" >&2
    with_database "$DATABASE_URL" "$1"
}

drop_bench_database() {
    "$PG_BINDIR/psql" -q -d "$DATABASE_URL" -c "drop database if exists $1 with (force)" >/dev/null 2>&1
}

# start_webhookd BINARY DB_URL SECRET LOG [VAR=value...]: serves the API
# role (unless the variables say otherwise) on a free loopback port with the
# Stripe secret; sets WEBHOOKD_PID and WEBHOOKD_URL once /readyz answers.
# Starts the benchmarks' HTTP sink on a free port: bench/sink.js when Node
# is there (BENCH_SINK=python: scripts/sink.py, as before 2026-12-06, also
# where Node is missing). Sets sink_port, sink_pid (added to BENCH_PIDS, so
# bench_cleanup stops it) and sink_kind; sink_count says how many
# deliveries it received.
start_sink() {
    sink_port=$(free_port 18180)
    if [ "${BENCH_SINK:-node}" = node ] && command -v node >/dev/null; then
        sink_kind="Node (bench/sink.js)"
        node bench/sink.js "$sink_port" > "$1" 2>&1 &
    else
        sink_kind="Python (scripts/sink.py)"
        python3 scripts/sink.py "$sink_port" > "$1" 2>&1 &
    fi
    sink_pid=$!
    BENCH_PIDS="${BENCH_PIDS:-} $sink_pid"
    for _ in $(seq 1 100); do
        if sink_count >/dev/null 2>&1; then return 0; fi
        sleep 0.05
    done
    die "the sink did not start"
}
sink_count() { python3 -c 'import sys,urllib.request as u; print(u.urlopen(sys.argv[1], timeout=5).read().decode())' "http://127.0.0.1:$sink_port/"; }

start_webhookd() {
    local binary=$1 db_url=$2 secret=$3 logfile=$4 port
    shift 4
    port=$(free_port 18080)
    env DATABASE_URL="$db_url" WEBHOOKD_LISTEN="127.0.0.1:$port" WEBHOOKD_ADMIN_LISTEN=127.0.0.1:0 WEBHOOKD_ROLE=api STRIPE_WEBHOOK_SECRET="$secret" \
        WEBHOOKD_DB_MAX_CONNECTIONS="${WEBHOOKD_DB_MAX_CONNECTIONS:-64}" RUST_LOG=warn "$@" \
        "$binary" serve > "$logfile" 2>&1 &
    WEBHOOKD_PID=$!
    WEBHOOKD_URL=http://127.0.0.1:$port
    for _ in $(seq 1 100); do
        if "$binary" healthcheck "$WEBHOOKD_URL/readyz" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    cat "$logfile" >&2
    die "webhookd did not become ready"
}

# Debian's PgBouncer, for the tests and benchmarks behind a transaction
# pooler: installs the package when it is missing (as root, else with
# sudo -n).
require_pgbouncer() {
    pgbouncer_bin >/dev/null && return 0
    apt_install "PgBouncer is needed for the pooler tests" pgbouncer
    # The package starts a system-wide PgBouncer on 6432; ours run on ports of their own.
    pgbouncer_bin >/dev/null || die "pgbouncer installed, yet not found"
}

pgbouncer_bin() { command -v pgbouncer 2>/dev/null || { [ -x /usr/sbin/pgbouncer ] && echo /usr/sbin/pgbouncer; }; }

# start_pgbouncer DIR SERVER_URL [pool size] [server idle timeout]: PgBouncer
# in pool_mode = transaction on a free loopback port, in front of the server
# of SERVER_URL (every database, as its user), with no startup
# parameter ignored (webhookd must send none it refuses), trying a server
# that refused it again after 1 s (not 15), and failing a client that waited
# 10 s for a server connection. Sets PGBOUNCER_URL
# (no database: append /NAME). Stop it with stop_pgbouncer.
start_pgbouncer() {
    local dir=$1 server=$2 size=${3:-20} idle=${4:-600} listen fields
    # The server's address and credentials, one a line: host, port, the
    # user as a URL has it, as the auth file quotes it, and as a connection
    # string does, then the connection string's password setting (if any).
    mapfile -t fields < <(python3 -c '
import sys, urllib.parse as u
p = u.urlsplit(sys.argv[1])
if not p.hostname:
    sys.exit("start_pgbouncer: the server URL has no TCP host")
user = u.unquote(p.username or "postgres")
value = lambda s: "\x27" + s.replace("\x27", "\x27\x27") + "\x27"
for field in (p.hostname, p.port or 5432, u.quote(user, safe=""), "\"" + user.replace("\"", "\"\"") + "\"",
              value(user), "password=" + value(u.unquote(p.password)) if p.password else ""):
    print(field)' "$server")
    [ "${#fields[@]}" -eq 6 ] || die "start_pgbouncer: cannot read the server URL"
    mkdir -p "$dir"
    chmod 700 "$dir"
    listen=$(free_port 26432)
    # Clients come in as the server's user, trusted on loopback; PgBouncer
    # logs in to the server with the URL's password, if it has one.
    printf '%s ""\n' "${fields[3]}" > "$dir/users.txt"
    cat > "$dir/pgbouncer.ini" <<INI
[databases]
* = host=${fields[0]} port=${fields[1]} user=${fields[4]} ${fields[5]}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $listen
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
; Each transaction on the next server connection, not the last one used:
; a statement that wrongly spans two transactions meets another server.
server_round_robin = 1
default_pool_size = $size
max_client_conn = 2000
server_idle_timeout = $idle
server_login_retry = 1
query_wait_timeout = 10
ignore_startup_parameters =
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
    if [ "$(id -u)" -eq 0 ]; then
        PG_USER=${PG_USER:-$(pg_user)}
        chown -R "$PG_USER" "$dir"
    fi
    # As a daemon with a pid file: as root it runs under runuser, which
    # would not pass a signal on.
    as_pg_user "$(pgbouncer_bin)" -d -q "$dir/pgbouncer.ini" >/dev/null 2>&1 \
        || { cat "$dir/pgbouncer.log" >&2 || true; die "PgBouncer did not start"; }
    PGBOUNCER_PIDFILE=$dir/pgbouncer.pid
    PGBOUNCER_URL="postgres://${fields[2]}@127.0.0.1:$listen"
    local bindir
    bindir=$(pg_bindir)
    for _ in $(seq 1 100); do
        if "$bindir/pg_isready" -q -d "$PGBOUNCER_URL/postgres" 2>/dev/null; then
            log "PgBouncer (transaction mode) is running: $PGBOUNCER_URL"
            return 0
        fi
        sleep 0.1
    done
    cat "$dir/pgbouncer.log" >&2 || true
    die "PgBouncer did not start"
}

stop_pgbouncer() {
    local pid
    if [ -n "${PGBOUNCER_PIDFILE:-}" ] && pid=$(cat "$PGBOUNCER_PIDFILE" 2>/dev/null); then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    PGBOUNCER_PIDFILE=
}

# with_database URL NAME: URL with its database replaced by NAME.
with_database() {
    python3 -c 'import sys,urllib.parse as u; p=u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$1" "$2"
}
