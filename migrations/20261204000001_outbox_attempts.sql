-- Every failed delivery attempt of an outbox row, with its error: what the
-- console shows under each row and `webhookd explain` tells. A delivered
-- attempt adds no row (`outbox.delivered_at` says it), so the drainer's
-- happy path writes nothing more. Written by the statement that records
-- the attempts (`outbox::store::record_many`); goes with its row.
create table outbox_attempts (
    outbox_id bigint      not null references outbox (id) on delete cascade,
    attempt   integer     not null,
    at        timestamptz not null,
    -- `retry` (tried again later) or `dead` (no more attempts)
    outcome   text        not null check (outcome in ('retry', 'dead')),
    error     text        not null,
    primary key (outbox_id, attempt)
);
