-- `outbox retry` keeps `attempts` increasing (outcomes are recorded against
-- (id, attempts), so a number must never be reused); the retry budget counts
-- from the attempts a row had when it was re-queued.
alter table outbox add column requeued_attempts integer not null default 0;

-- Retention deletes delivered rows by age; the depth gauges read the rest.
create index outbox_delivered_at on outbox (delivered_at) where delivered_at is not null;
create index outbox_undelivered on outbox (created_at) where delivered_at is null;

-- Entries by the event that wrote them (explain, reconcile, retention).
create index wallet_entries_event on wallet_entries (provider, event_id);
