-- WEBHOOKD_PAYLOAD_RETENTION_DAYS: how far `prune` has replaced stored
-- payloads with stubs (events received before `through`), so that each
-- run starts where the last one ended instead of reading again every row
-- it expired. One row at most.
create table payload_expiry (
    singleton boolean primary key default true check (singleton),
    through   timestamptz not null
);
