-- no-transaction
-- An entry by its natural key's ref, or by a prefix of it, without provider or kind (related_events).
create index concurrently if not exists wallet_entries_source_ref on wallet_entries ((source_ref collate "C"));
