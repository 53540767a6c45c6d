#!/bin/sh
# Writes pgbouncer.ini and its auth file from the environment, then runs
# PgBouncer in the foreground (logging to stderr). Run it as an unprivileged
# user: PgBouncer refuses to run as root.
#
# Required:
#   PGBOUNCER_SERVER_HOST   Postgres's host
#   PGBOUNCER_DATABASE      the database; clients connect to it by this name
#   PGBOUNCER_USER          the role clients log in as, and PgBouncer too
#   PGBOUNCER_PASSWORD      its password: clients must give it (SCRAM), and
#                           PgBouncer logs in to Postgres with it
# Optional (PgBouncer's own default when unset, except pool_mode):
#   PGBOUNCER_SERVER_PORT (5432), PGBOUNCER_LISTEN_ADDR (0.0.0.0),
#   PGBOUNCER_LISTEN_PORT (6432), PGBOUNCER_POOL_MODE (transaction),
#   PGBOUNCER_MAX_CLIENT_CONN (100), PGBOUNCER_DEFAULT_POOL_SIZE (20),
#   PGBOUNCER_SERVER_IDLE_TIMEOUT (600), PGBOUNCER_QUERY_WAIT_TIMEOUT (120),
#   PGBOUNCER_IDLE_TRANSACTION_TIMEOUT (0: off), PGBOUNCER_SERVER_LOGIN_RETRY
#   (2: after a failed login to Postgres, try again this soon; PgBouncer's
#   own default, 15, keeps refusing clients that long), timeouts in seconds;
#   PGBOUNCER_CONFIG_DIR (/run/pgbouncer), where the two files are written.
# Arguments are passed to pgbouncer before the file (e.g. -v).
set -eu

fail() {
    echo "pgbouncer-entrypoint: $*" >&2
    exit 1
}

required() {
    eval "value=\${$1:-}"
    [ -n "$value" ] || fail "$1 is not set"
}

# Names go into pgbouncer.ini unquoted: keep them to what needs no quoting.
name() {
    eval "value=\${$1}"
    case $value in
        *[!A-Za-z0-9_.-]*) fail "$1 may hold only letters, digits, '_', '.' and '-'" ;;
    esac
}

integer() {
    eval "value=\${$1}"
    case $value in
        '' | *[!0-9]*) fail "$1 must be a whole number" ;;
    esac
}

# Seconds, as PgBouncer reads them: 600 or 0.5.
seconds() {
    eval "value=\${$1}"
    case $value in
        '' | .* | *. | *.*.* | *[!0-9.]*) fail "$1 must be a number of seconds" ;;
    esac
}

for var in PGBOUNCER_SERVER_HOST PGBOUNCER_DATABASE PGBOUNCER_USER PGBOUNCER_PASSWORD; do
    required "$var"
done

: "${PGBOUNCER_SERVER_PORT:=5432}"
: "${PGBOUNCER_LISTEN_ADDR:=0.0.0.0}"
: "${PGBOUNCER_LISTEN_PORT:=6432}"
: "${PGBOUNCER_POOL_MODE:=transaction}"
: "${PGBOUNCER_MAX_CLIENT_CONN:=100}"
: "${PGBOUNCER_DEFAULT_POOL_SIZE:=20}"
: "${PGBOUNCER_SERVER_IDLE_TIMEOUT:=600}"
: "${PGBOUNCER_QUERY_WAIT_TIMEOUT:=120}"
: "${PGBOUNCER_IDLE_TRANSACTION_TIMEOUT:=0}"
: "${PGBOUNCER_SERVER_LOGIN_RETRY:=2}"
: "${PGBOUNCER_CONFIG_DIR:=/run/pgbouncer}"

name PGBOUNCER_SERVER_HOST
name PGBOUNCER_DATABASE
name PGBOUNCER_USER
name PGBOUNCER_LISTEN_ADDR
integer PGBOUNCER_SERVER_PORT
integer PGBOUNCER_LISTEN_PORT
integer PGBOUNCER_MAX_CLIENT_CONN
integer PGBOUNCER_DEFAULT_POOL_SIZE
seconds PGBOUNCER_SERVER_IDLE_TIMEOUT
seconds PGBOUNCER_QUERY_WAIT_TIMEOUT
seconds PGBOUNCER_IDLE_TRANSACTION_TIMEOUT
seconds PGBOUNCER_SERVER_LOGIN_RETRY
case $PGBOUNCER_POOL_MODE in
    session | transaction | statement) ;;
    *) fail "PGBOUNCER_POOL_MODE must be session, transaction or statement" ;;
esac
case $PGBOUNCER_PASSWORD in
    *'
'*) fail "PGBOUNCER_PASSWORD may not hold a line break" ;;
esac

# The auth file holds the password in plain text: owner only.
umask 077
mkdir -p "$PGBOUNCER_CONFIG_DIR"
ini=$PGBOUNCER_CONFIG_DIR/pgbouncer.ini
users=$PGBOUNCER_CONFIG_DIR/userlist.txt

# "user" "password", a double quote inside a field doubled. A plain-text
# password serves both ways: PgBouncer checks clients' SCRAM logins against
# it, and answers Postgres's SCRAM (or md5) challenge with it.
quote() {
    printf '"%s"' "$(printf '%s' "$1" | sed 's/"/""/g')"
}
printf '%s %s\n' "$(quote "$PGBOUNCER_USER")" "$(quote "$PGBOUNCER_PASSWORD")" > "$users"

cat > "$ini" <<INI
; Written by pgbouncer-entrypoint at start-up; edits are lost.
[databases]
; No user or password here: PgBouncer logs in as the client's user, with
; the password of the auth file.
$PGBOUNCER_DATABASE = host=$PGBOUNCER_SERVER_HOST port=$PGBOUNCER_SERVER_PORT dbname=$PGBOUNCER_DATABASE

[pgbouncer]
listen_addr = $PGBOUNCER_LISTEN_ADDR
listen_port = $PGBOUNCER_LISTEN_PORT
; TCP only: no socket file to write.
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $users
pool_mode = $PGBOUNCER_POOL_MODE
max_client_conn = $PGBOUNCER_MAX_CLIENT_CONN
default_pool_size = $PGBOUNCER_DEFAULT_POOL_SIZE
server_idle_timeout = $PGBOUNCER_SERVER_IDLE_TIMEOUT
query_wait_timeout = $PGBOUNCER_QUERY_WAIT_TIMEOUT
idle_transaction_timeout = $PGBOUNCER_IDLE_TRANSACTION_TIMEOUT
server_login_retry = $PGBOUNCER_SERVER_LOGIN_RETRY
; Empty: a client that sends a startup parameter PgBouncer cannot keep per
; client is refused rather than silently given another's setting.
ignore_startup_parameters =
INI

exec /usr/sbin/pgbouncer "$@" "$ini"
