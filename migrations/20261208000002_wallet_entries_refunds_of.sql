-- no-transaction
-- A credit's refunds, by the credit's ref (related_events) or with its
-- provider (the refund's room left, ledger): one partial index for what
-- wallet_entries_parent and wallet_entries_parent_ref both did.
create index concurrently if not exists wallet_entries_refunds_of
    on wallet_entries (parent_ref, provider) where parent_ref is not null;
