-- no-transaction
-- Outbox partitions, step 4 of 6: the legacy partition's dedupe key.
create unique index concurrently if not exists outbox_month_dedupe_key
    on outbox (topic, dedupe_key, month);
