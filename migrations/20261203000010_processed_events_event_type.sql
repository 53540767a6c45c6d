-- no-transaction
-- The console's listing by event type, newest first: a type's events are
-- found without walking every event (a rare or mistyped type used to read
-- the whole table). Type and arrival never change after the claim, so the
-- claim's update of the outcome stays a HOT update.
create index concurrently if not exists processed_events_event_type on processed_events (event_type, received_at);
