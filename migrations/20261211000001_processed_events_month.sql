-- Monthly partitions of processed_events, step 1 of 4 (OPERATIONS,
-- "Upgrading to monthly partitions"). `month` is the partition key: the
-- first day (UTC) of the month whose partition holds the row. Every row of
-- today's table gets 1970-01-01, the key of the one partition the table
-- becomes (`processed_events_legacy`). A column with a constant default
-- and a NOT VALID check are catalogue changes: nothing is rewritten or
-- scanned, and the lock they take is held for milliseconds.
-- `payload_expired_at`: when `prune` replaced the payload with a stub
-- (WEBHOOKD_PAYLOAD_RETENTION_DAYS); nullable, no rewrite either.
alter table processed_events add column month date not null default '1970-01-01';
alter table processed_events add column payload_expired_at timestamptz;
alter table processed_events add constraint processed_events_legacy_month
    check (month = '1970-01-01') not valid;
