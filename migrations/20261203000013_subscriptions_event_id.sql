-- no-transaction
-- The subscriptions whose stored state an event wrote (the console's event page), keyed event id first.
create index concurrently if not exists subscriptions_event_id on subscriptions (event_id, provider);
