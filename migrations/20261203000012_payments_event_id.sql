-- no-transaction
-- The payments an event recorded (the console's event page, `webhookd explain`), keyed event id first as wallet_entries_event_id is.
create index concurrently if not exists payments_event_id on payments (event_id, provider) where event_id is not null;
