-- One row per provider that sweeps read: how far the periodic sweep has
-- got (everything created before `swept_until` was swept), who is sweeping
-- (a lease with its holder, so that one process sweeps a provider at a
-- time, behind a pooler too), how the last run went, and `not_before`: the
-- cut-over that `webhookd import` records, before which an earlier handler
-- applied everything, so that no sweep reads earlier.
create table sweeps (
    provider        text primary key,
    swept_until     timestamptz,
    holder          uuid,
    leased_until    timestamptz,
    last_run_at     timestamptz,
    last_success_at timestamptz,
    last_result     jsonb,
    not_before      timestamptz
);
