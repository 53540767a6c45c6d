-- no-transaction
-- Served by the primary key (20261208000006_related_events_by_provider.sql).
drop index concurrently if exists processed_events_event_id;
