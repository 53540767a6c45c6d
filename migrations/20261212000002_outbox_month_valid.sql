-- Outbox partitions, step 2 of 6: proves every row is of the legacy month
-- (reads each table under SHARE UPDATE EXCLUSIVE: writes go on).
alter table outbox validate constraint outbox_legacy_month;
alter table outbox_attempts validate constraint outbox_attempts_legacy_month;
