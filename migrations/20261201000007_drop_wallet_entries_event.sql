-- no-transaction
-- Replaced by wallet_entries_event_id (the previous migration).
drop index concurrently if exists wallet_entries_event;
