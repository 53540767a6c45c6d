-- no-transaction
-- The owners another user claimed too, most recent first (owners::conflicted:
-- the console's owners page). Partial: a first claim writes nothing to it.
create index concurrently if not exists owners_conflicted on owners (learned_at)
    where conflicts > 0;
