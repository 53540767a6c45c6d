-- Erasure on request (`webhookd erase user <id>`): when each event's and
-- each outbox row's personal data was removed (their payloads and
-- free-text detail; amounts, keys and outcomes stay), and one row per
-- erasure that changed anything, so that it can be shown it happened.
-- Nullable columns without a default: adding them rewrites nothing.
alter table processed_events add column erased_at timestamptz;
alter table outbox add column erased_at timestamptz;

create table erasures (
    id          bigserial primary key,
    user_id     text not null,
    erased_at   timestamptz not null default now(),
    events      integer not null,
    outbox_rows integer not null
);
create index erasures_user_id on erasures (user_id);
