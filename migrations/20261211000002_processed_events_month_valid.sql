-- Monthly partitions, step 2 of 4: proves every row is of the legacy month,
-- so that attaching the table as that partition scans nothing. VALIDATE
-- reads the table under SHARE UPDATE EXCLUSIVE: ingest goes on meanwhile.
alter table processed_events validate constraint processed_events_legacy_month;
