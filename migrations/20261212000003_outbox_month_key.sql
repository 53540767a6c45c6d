-- no-transaction
-- Outbox partitions, step 3 of 6: the legacy partition's primary key,
-- built while the drainer and ingest go on. A failed build leaves an
-- invalid index: drop it and migrate again.
create unique index concurrently if not exists outbox_month_key on outbox (id, month);
