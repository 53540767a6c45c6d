-- no-transaction
drop index concurrently if exists wallet_entries_parent;
