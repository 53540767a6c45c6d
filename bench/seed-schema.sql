-- The seed transaction's tables, which scripts/bench.sh measures webhookd against.
-- Tables of the reference transaction in seed-txn.sql (not webhookd's schema).
CREATE TABLE IF NOT EXISTS wallets (
    user_id       text PRIMARY KEY,
    balance_cents bigint NOT NULL DEFAULT 0,
    updated_at    timestamptz
);

CREATE TABLE IF NOT EXISTS processed_events (
    event_id     text PRIMARY KEY,
    event_type   text NOT NULL,
    processed_at timestamptz DEFAULT now(),
    result       jsonb
);

CREATE TABLE IF NOT EXISTS outbox (
    id         bigserial PRIMARY KEY,
    topic      text,
    payload    jsonb,
    created_at timestamptz DEFAULT now()
);
