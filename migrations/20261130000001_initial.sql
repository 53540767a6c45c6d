-- webhookd schema, as described in DESIGN.md ("Data model").
-- Amounts are bigint minor units; currencies upper-case ISO 4217 codes.

-- The dedupe ledger and audit trail: one row per (provider, event id), ever.
create table processed_events (
    provider            text        not null,
    event_id            text        not null,
    event_type          text        not null,
    outcome             text        not null
        check (outcome in ('pending', 'processed', 'ignored', 'superseded', 'deferred', 'rejected')),
    detail              jsonb       not null default '{}'::jsonb,
    payload             jsonb       not null,
    provider_created_at timestamptz,
    received_at         timestamptz not null default now(),
    primary key (provider, event_id)
);

create index processed_events_received_at on processed_events (received_at);

create table wallets (
    user_id       text        not null,
    currency      text        not null check (currency ~ '^[A-Z]{3}$'),
    balance_minor bigint      not null default 0,
    updated_at    timestamptz not null default now(),
    primary key (user_id, currency)
);

-- Every balance change is an entry: credits positive, debits negative.
-- The natural key makes a second credit of one payment impossible even if the
-- event-id layer were wrong. `parent_ref` links a refund to the credit it debits.
create table wallet_entries (
    id           bigint generated always as identity primary key,
    user_id      text        not null,
    currency     text        not null,
    amount_minor bigint      not null check (amount_minor <> 0),
    kind         text        not null check (kind in ('credit', 'refund')),
    provider     text        not null,
    source_ref   text        not null,
    event_id     text        not null,
    parent_ref   text,
    created_at   timestamptz not null default now(),
    constraint wallet_entries_natural_key unique (provider, kind, source_ref),
    foreign key (user_id, currency) references wallets (user_id, currency)
);

create index wallet_entries_wallet on wallet_entries (user_id, currency);
create index wallet_entries_parent on wallet_entries (provider, parent_ref) where parent_ref is not null;

-- `event_id` is the event that recorded the payment itself (its receipt).
create table payments (
    provider            text        not null,
    payment_id          text        not null,
    payment_ref         text,
    user_id             text,
    amount_minor        bigint      not null,
    currency            text        not null check (currency ~ '^[A-Z]{3}$'),
    status              text        not null,
    refunded_minor      bigint      not null default 0 check (refunded_minor >= 0),
    provider_created_at timestamptz,
    event_id            text,
    updated_at          timestamptz not null default now(),
    primary key (provider, payment_id)
);

create table subscriptions (
    provider            text        not null,
    subscription_id     text        not null,
    customer_id         text,
    user_id             text,
    status              text        not null,
    plan_id             text,
    current_period_end  timestamptz,
    provider_updated_at timestamptz not null,
    event_id            text        not null,
    updated_at          timestamptz not null default now(),
    primary key (provider, subscription_id)
);

-- Events whose dependency has not arrived yet; applied inside the transaction
-- that brings the dependency (`waits_for` is the credit's source_ref).
create table deferred_events (
    provider   text        not null,
    event_id   text        not null,
    waits_for  text        not null,
    created_at timestamptz not null default now(),
    primary key (provider, event_id),
    foreign key (provider, event_id) references processed_events (provider, event_id) on delete cascade
);

create index deferred_events_waits_for on deferred_events (provider, waits_for);

-- Transactional outbox: written in the ingest transaction, drained afterwards.
create table outbox (
    id           bigint generated always as identity primary key,
    topic        text        not null,
    dedupe_key   text        not null,
    provider     text        not null,
    event_id     text        not null,
    payload      jsonb       not null,
    created_at   timestamptz not null default now(),
    available_at timestamptz not null default now(),
    attempts     integer     not null default 0,
    locked_until timestamptz,
    last_error   text,
    delivered_at timestamptz,
    dead_at      timestamptz,
    constraint outbox_topic_dedupe_key unique (topic, dedupe_key)
);

create index outbox_due on outbox (available_at) where delivered_at is null and dead_at is null;

-- Natural key of `invoice.paid`: one notification per invoice, whatever the event id.
create unique index outbox_invoice_paid on outbox (provider, (payload ->> 'invoice_id'))
    where topic = 'invoice.paid';

-- Payment statuses only move forward: a late `charge.succeeded` never moves a
-- refunded payment back.
create function payment_status_rank(status text) returns integer
    language sql immutable strict parallel safe
    return case status
        when 'pending' then 1
        when 'failed' then 2
        when 'succeeded' then 3
        when 'captured' then 3
        when 'partially_refunded' then 4
        when 'refunded' then 5
        else 0
    end;
