-- no-transaction
-- The console's listing by how events came, for the few that did not come
-- as webhooks (sweeps, imports, replays): partial, so a webhook's claim
-- writes nothing to it.
create index concurrently if not exists processed_events_received_via on processed_events (received_via, received_at)
    where received_via <> 'webhook';
