-- no-transaction
-- A user's payments (the console's user page, related_events).
create index concurrently if not exists payments_user_id on payments (user_id) where user_id is not null;
