#!/usr/bin/env bash
# Regenerates .sqlx/, the offline query data that lets every build check its
# SQL without a database. Run it after changing a query or a migration.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

require_cargo
scratch=$(mktemp -d "${TMPDIR:-/tmp}/webhookd-sqlx-pg.XXXXXX")
chmod 755 "$scratch"
trap 'stop_cluster; rm -rf "$scratch"' EXIT
start_cluster "$scratch/data" fsync=off

psql=("$PG_BINDIR/psql" -q -v ON_ERROR_STOP=1 -d "$DATABASE_URL")
for migration in migrations/*.sql; do "${psql[@]}" -f "$migration"; done
# The table sqlx keeps its history in, which the readiness query reads.
"${psql[@]}" -c "create table _sqlx_migrations (version bigint primary key, description text not null,
    installed_on timestamptz not null default now(), success boolean not null,
    checksum bytea not null, execution_time bigint not null)"

rm -rf .sqlx && mkdir .sqlx
touch src/lib.rs   # re-expand every query macro
SQLX_OFFLINE=false SQLX_OFFLINE_DIR="$PWD/.sqlx" cargo build --lib
log "wrote $(ls .sqlx | wc -l) queries to .sqlx/"
