-- Credits granted per paid invoice (`WEBHOOKD_SOURCE_<NAME>_INVOICE_CREDITS`):
-- entries of kind `invoice_credit`, keyed by the invoice. The check is
-- replaced unvalidated first, then validated without blocking writes.
alter table wallet_entries drop constraint wallet_entries_kind_check;
alter table wallet_entries add constraint wallet_entries_kind_check
    check (kind in ('credit', 'refund', 'invoice_credit')) not valid;
alter table wallet_entries validate constraint wallet_entries_kind_check;
