-- no-transaction
-- Outbox partitions, step 5 of 6: the legacy attempts' primary key.
create unique index concurrently if not exists outbox_attempts_month_key
    on outbox_attempts (outbox_id, attempt, month);
