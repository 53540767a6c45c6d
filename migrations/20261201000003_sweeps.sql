-- One row per provider that the periodic sweep reads: how far it has got
-- (everything created before `swept_until` was swept), who is sweeping
-- (a lease, so that one process sweeps a provider at a time, behind a
-- pooler too), and how the last run went.
create table sweeps (
    provider     text primary key,
    swept_until  timestamptz,
    leased_until timestamptz,
    last_run_at  timestamptz,
    last_success_at timestamptz,
    last_result  jsonb
);
