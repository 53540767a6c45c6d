-- An event's row in processed_events is written once, with its outcome, at
-- the end of the transaction that claims it (its claim is an advisory lock
-- on its id, ARCHITECTURE "The claim"). A refund deferred in that
-- transaction names its event before the event's row exists, so the
-- reference is checked at commit. No table is rewritten or scanned.
alter table deferred_events
    alter constraint deferred_events_provider_event_id_fkey deferrable initially deferred;
