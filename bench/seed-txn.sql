-- The seed transaction, the baseline scripts/bench.sh measures webhookd against.
-- The reference transaction of a hand-written idempotent webhook handler
-- (claim the event id, credit the wallet, write an outbox row, commit), as
-- pgbench runs it straight against Postgres: no HTTP, no JSON, no signature.
-- webhookd's throughput is quoted as a ratio against this, same run, same
-- Postgres, same concurrency. Apply seed-schema.sql to a scratch database and
-- seed the wallets first:
--   psql "$URL" -f seed-schema.sql
--   psql "$URL" -c "insert into wallets(user_id) select 'user_'||g from generate_series(1,1000) g"
--   pgbench -n -M prepared -f seed-txn.sql -D users=1000 -D amount=1000 -c 32 -j 1 -T 15 "$URL"
\set uid random(1, :users)
BEGIN;
INSERT INTO processed_events (event_id, event_type)
    VALUES ('evt_pgb_' || gen_random_uuid(), 'payment_intent.succeeded')
    RETURNING event_id AS eid \gset
UPDATE wallets SET balance_cents = balance_cents + :amount::bigint, updated_at = now()
    WHERE user_id = 'user_' || :uid::int;
INSERT INTO outbox (topic, payload)
    VALUES ('wallet.credited',
            jsonb_build_object('event_id', :eid::text, 'user_id', 'user_' || :uid::int,
                               'amount_cents', :amount::bigint, 'currency', 'usd'));
COMMIT;
