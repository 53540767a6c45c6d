-- no-transaction
-- A user's subscriptions (the console's user page, related_events).
create index concurrently if not exists subscriptions_user_id on subscriptions (user_id) where user_id is not null;
