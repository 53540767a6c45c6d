-- no-transaction
-- The owners learned most recently (owners::recent: the console's owners page).
create index concurrently if not exists owners_recent on owners (learned_at);
