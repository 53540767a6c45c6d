-- no-transaction
-- The events waiting for an owner, oldest first (events::owner_waits: the
-- console's deferred page and /metrics; events::owner_waits_before: their
-- expiry). Partial: a refund waiting for its credit writes nothing to it.
create index concurrently if not exists deferred_events_owner_waits on deferred_events (created_at)
    where starts_with(waits_for, 'owner:');
