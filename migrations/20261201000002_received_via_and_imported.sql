-- How each event came: delivered as a webhook, found by a sweep of the
-- provider's API, or recorded by `webhookd import` (an earlier handler
-- applied it). `replay` is reserved for events re-run from another store.
-- The checks are added `not valid` and validated apart, so that a large
-- table is never locked against ingest while its rows are read.
alter table processed_events add column received_via text not null default 'webhook';
alter table processed_events add constraint processed_events_received_via_check
    check (received_via in ('webhook', 'sweep', 'replay', 'import')) not valid;
alter table processed_events validate constraint processed_events_received_via_check;

-- `imported`: recorded without effects, so that a redelivery or a sweep of
-- the event is a duplicate.
alter table processed_events drop constraint processed_events_outcome_check;
alter table processed_events add constraint processed_events_outcome_check
    check (outcome in ('pending', 'processed', 'ignored', 'superseded', 'deferred', 'rejected', 'imported'))
    not valid;
alter table processed_events validate constraint processed_events_outcome_check;
