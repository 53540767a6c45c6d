-- Owners learned: whose money a provider's customer or payment is, taught
-- by an event that names the owner together with it (a completed Checkout
-- Session names its client_reference_id, its customer and its payment
-- intent; a customer, payment or subscription with the metadata key names
-- both). The first claim stays; a different later claim moves no money and
-- is counted in `conflicts`.
create table owners (
    provider   text        not null,
    subject    text        not null check (subject in ('customer', 'payment')),
    subject_id text        not null,
    user_id    text        not null,
    -- The event that taught it.
    event_id   text        not null,
    conflicts  bigint      not null default 0,
    learned_at timestamptz not null default now(),
    primary key (provider, subject, subject_id)
);

-- The payments that pay an invoice (a subscription's renewal included):
-- theirs is the invoice's money, never a wallet top-up. Older API versions
-- name the invoice on the payment intent, current ones join them through
-- `invoice_payment.paid`, and `invoice.paid` names its payment intent.
create table invoice_payments (
    provider   text        not null,
    payment_id text        not null,
    invoice_id text        not null,
    event_id   text        not null,
    created_at timestamptz not null default now(),
    primary key (provider, payment_id)
);

-- `subscriptions::attribute`: a customer's subscriptions still without an
-- owner, given the one just learned.
create index subscriptions_unowned_by_customer on subscriptions (provider, customer_id)
    where user_id is null;
