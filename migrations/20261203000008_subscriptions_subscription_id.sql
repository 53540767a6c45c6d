-- no-transaction
-- A subscription by its id without the provider (related_events, search).
create index concurrently if not exists subscriptions_subscription_id on subscriptions (subscription_id);
