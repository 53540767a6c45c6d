-- no-transaction
-- The subjects a user owns (owners::of_user: the console's user page,
-- `webhookd explain`, related_events). Built concurrently, one statement a file.
create index concurrently if not exists owners_of_user on owners (user_id);
