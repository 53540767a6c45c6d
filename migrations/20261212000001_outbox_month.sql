-- Monthly partitions of the outbox and its attempts, step 1 of 6 (as for
-- processed_events, 20261211000001): `month` is the partition key, the
-- first day (UTC) of the month whose partition holds the row; an attempt
-- is in its outbox row's month, so that a month of both goes at once.
-- Every existing row gets 1970-01-01, the key of the legacy partition each
-- table becomes. Catalogue changes only: nothing is rewritten or scanned.
alter table outbox add column month date not null default '1970-01-01';
alter table outbox add constraint outbox_legacy_month check (month = '1970-01-01') not valid;
alter table outbox_attempts add column month date not null default '1970-01-01';
alter table outbox_attempts add constraint outbox_attempts_legacy_month
    check (month = '1970-01-01') not valid;
