-- no-transaction
-- Refunds by the credit they debit, without the provider (related_events).
create index concurrently if not exists wallet_entries_parent_ref on wallet_entries (parent_ref) where parent_ref is not null;
