-- no-transaction
-- An event id without its provider (search, explain). Built concurrently, one statement a file, so ingest goes on.
create index concurrently if not exists processed_events_event_id on processed_events (event_id);
