-- The natural key of `invoice.paid`: one announcement per invoice, whatever
-- the event id, in a table of its own (the outbox is only the outbox, and
-- retention prunes its delivered rows without an exception). Kept as long as
-- the ledger's keys.
create table invoices (
    provider   text        not null,
    invoice_id text        not null,
    -- The event whose `invoice.paid` announced it.
    event_id   text        not null,
    paid_at    timestamptz not null default now(),
    primary key (provider, invoice_id)
);

insert into invoices (provider, invoice_id, event_id, paid_at)
select provider, payload ->> 'invoice_id', event_id, created_at
from outbox
where topic = 'invoice.paid' and payload ->> 'invoice_id' is not null
on conflict do nothing;

-- `outbox_invoice_paid` stays while a process older than this one may still
-- run (it dedupes by that index alone); nothing here relies on it.
