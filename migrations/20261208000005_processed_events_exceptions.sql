-- no-transaction
-- The events that did not simply apply or get ignored (rejected, deferred,
-- superseded, imported: a few in a hundred), by outcome and time: the
-- console's outcome filter without walking every event. An event's row is
-- written once with its outcome, so this index costs only the events in it
-- (and an update of a deferred event's outcome when it is released).
create index concurrently if not exists processed_events_exceptions
    on processed_events (outcome, received_at) where outcome not in ('processed', 'ignored');
