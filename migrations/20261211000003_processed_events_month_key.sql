-- no-transaction
-- Monthly partitions, step 3 of 4: the legacy partition's primary key,
-- built beside the table's while ingest goes on. A partitioned table's
-- unique keys must hold its partition key; dedupe never rested on this
-- index (every writer claims the event id first; ARCHITECTURE, "Partitions
-- and the claim"). One statement a file: CONCURRENTLY runs outside a
-- transaction. A failed build leaves an invalid index: drop it and migrate
-- again.
create unique index concurrently if not exists processed_events_month_key
    on processed_events (provider, event_id, month);
