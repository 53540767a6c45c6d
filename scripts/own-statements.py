#!/usr/bin/env python3
"""Prints a pgbench script of the transaction webhookd runs for one Stripe
credit delivered alone: its own statements, read from the compile-time query
data in .sqlx/ (what the binary runs, never a copy), and the BEGIN of
src/ingest/engine.rs. Only the values bound to the parameters are written
here, as a credit of `:amount` to one of `:users` wallets.

Usage: scripts/own-statements.py > own.sql
       pgbench -n -M prepared -f own.sql -D users=1000 -D amount=1000 ...
"""
import glob
import json
import re
import sys

ROOT = __file__.rsplit("/scripts/", 1)[0] if "/scripts/" in __file__ else "."


def statement(marker):
    """The one query in .sqlx/ containing `marker`."""
    found = []
    for path in glob.glob(f"{ROOT}/.sqlx/query-*.json"):
        with open(path) as f:
            query = json.load(f)["query"]
        if marker in query:
            found.append(query)
    if len(found) != 1:
        sys.exit(f"own-statements: {len(found)} queries in .sqlx/ contain {marker!r}, not 1")
    return found[0]


def begin():
    """The BEGIN of a transaction of one event, from the engine's source, as
    two statements (pgbench prepares each line, and a prepared statement
    holds one command): `begin`, then its `set local`s as one `set_config`
    select. The service sends them in one round trip; here they take two."""
    with open(f"{ROOT}/src/ingest/engine.rs") as f:
        source = f.read()
    match = re.search(r'const BEGIN_ONE: &str = "((?:[^"\\]|\\.)*)";', source, re.S)
    if not match:
        sys.exit("own-statements: BEGIN_ONE not found in src/ingest/engine.rs")
    parts = [p.strip() for p in re.sub(r"\\\n\s*", "", match.group(1)).split(";") if p.strip()]
    settings = []
    for part in parts[1:]:
        name, value = re.fullmatch(r"set local (\w+) = '?([^']*)'?", part).groups()
        settings.append(f"set_config('{name}', '{value}', true)")
    return [parts[0] + ";", "select " + ", ".join(settings) + ";"]


def bind(query, values):
    """The query with $1, $2, ... replaced by pgbench expressions, on one
    line (pgbench reads a statement per line unless it ends in `;`)."""
    def value(match):
        return f"({values[int(match.group(1)) - 1]})"
    bound = re.sub(r"\$(\d+)", value, query)
    bound = re.sub(r"--[^\n]*", "", bound)
    return " ".join(bound.split()) + ";"


EVENT = "'evt_own_' || :eid::text"
INTENT = "'pi_own_' || :eid::text"
USER = "'user_' || :uid::text"
# pgbench reads `:name` as a variable even inside a literal: no colon is
# followed by a letter here.
WALLET = "'wallet:' || " + USER + " || ':' || 'USD'"
PAYLOAD = (
    "'{\"id\": \"evt_own\", \"object\": \"event\", \"type\": \"payment_intent.succeeded\", "
    "\"created\": 1764547200, \"data\": {\"object\": {\"id\": \"pi_own\", \"object\": \"payment_intent\", "
    "\"amount\": 1000, \"amount_received\": 1000, \"currency\": \"usd\", \"status\": \"succeeded\", "
    "\"metadata\": {\"user_id\": \"user_1\"}}}}'"
)

claim = bind(statement("pg_try_advisory_xact_lock(hash)"), [
    "array['stripe']", f"array[{EVENT}]", "array[0, 0]::int[]", "array[1, 2]::smallint[]",
    f"array['stripe:' || 'credit:' || {INTENT}, {WALLET}]", "0::smallint",
    # The claim's key, events::claim_key (no colon is followed by a letter).
    f"array['event' || ':' || 'stripe' || ':' || {EVENT}]",
    # What may wait for the credit, read after the locks
    # (Decoded::awaited): its payment. Nothing else asks it again.
    "array['stripe']", f"array[{INTENT}]",
    # The event's own time: a fresh event, so the claim reads this month's
    # partition (event_month_floor) and the legacy one.
    "array[extract(epoch from now())::bigint]",
])
post = bind(statement("insert into wallet_entries\n"), [
    f"array[{USER}]", "array['USD']", "array[:amount::bigint]", "array['credit']", "array['stripe']",
    f"array[{INTENT}]", f"array[{EVENT}]", "array[null]::text[]",
])
payload = (
    "jsonb_build_object('user_id', " + USER + ", 'currency', 'USD', 'amount_minor', :amount::bigint, "
    "'balance_minor', :amount::bigint, 'entry_id', 1, 'payment_intent', " + INTENT + ")"
)
enqueue = bind(statement("ordering_key, position"), [
    "array['wallet.credited']", "array['stripe']", f"array[{EVENT}]", f"array[{payload}]",
    f"array[{WALLET}]",
    # The lease of a row handed to the drainer in the same process: none,
    # as for a transaction of one event in the API role, so no sink's.
    "null::float8", "null::text",
])
detail = "jsonb_build_object('entry_id', 1, 'balance_minor', :amount::bigint, 'outbox_id', 1, 'applied_deferred', '[]'::jsonb)"
record = bind(statement("payload::jsonb, to_timestamp(created)"), [
    "array['stripe']", f"array[{EVENT}]", "array['payment_intent.succeeded']", "array['processed']",
    f"array[{detail}]", f"array[{PAYLOAD}]", "array[1764547200]::bigint[]", "array['webhook']",
    # The source column: none for /webhooks/stripe (the provider's own);
    # no connected account; the API version of a snapshot event.
    "array[null]::text[]", "array[null]::text[]", "array['2024-06-20']",
])

print("-- webhookd's own transaction for one Stripe credit, generated by scripts/own-statements.py")
print("\\set uid random(1, :users)")
print("\\set eid random(1, 9000000000000000000)")
for line in [*begin(), claim, post, enqueue, record, "commit;"]:
    print(line)
