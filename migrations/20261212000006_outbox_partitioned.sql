-- Outbox partitions, step 6 of 6: one short transaction that swaps both
-- tables for partitioned ones, as 20261211000004 did for processed_events:
-- nothing is scanned, copied or indexed.
-- - A partitioned table's unique keys hold its month: a row's id is still
--   unique (one sequence), and its dedupe key is unique across months
--   because every writer of an event's rows holds that event's locks and
--   reads first (outbox::store::enqueue; ARCHITECTURE, "Partitions and the
--   claim").
-- - The id's sequence is a new one, `outbox_row_id`, going on from the
--   legacy table's identity (whose sequence goes with that table).
-- - `outbox_invoice_paid` goes: `invoices` (20261205000001) holds that
--   natural key since, for as long as the ledger.
-- - The foreign key from attempts goes (one into a partitioned table must
--   hold its month): an attempt is written with its row's month, and moves
--   with it.
alter table outbox_attempts drop constraint outbox_attempts_outbox_id_fkey;

alter table outbox rename to outbox_legacy;
alter table outbox_legacy drop constraint outbox_pkey;
alter table outbox_legacy add constraint outbox_legacy_pkey primary key using index outbox_month_key;
alter table outbox_legacy drop constraint outbox_topic_dedupe_key;
alter table outbox_legacy add constraint outbox_legacy_topic_dedupe_key
    unique using index outbox_month_dedupe_key;
drop index outbox_invoice_paid;
alter index outbox_delivered_at rename to outbox_legacy_delivered_at;
alter index outbox_due rename to outbox_legacy_due;
alter index outbox_pending_by_key rename to outbox_legacy_pending_by_key;
alter index outbox_undelivered rename to outbox_legacy_undelivered;
-- the parent's trigger is cloned onto each partition, this one included
drop trigger outbox_payload_bytes on outbox_legacy;

create sequence outbox_row_id;
select setval('outbox_row_id', coalesce(pg_sequence_last_value('outbox_id_seq'), 0) + 1, false);
create table outbox (like outbox_legacy including defaults including constraints)
    partition by range (month);
alter sequence outbox_row_id owned by outbox.id;
alter table outbox drop constraint outbox_legacy_month;
alter table outbox alter column id set default nextval('outbox_row_id');
alter table outbox alter column month set default (date_trunc('month', now() at time zone 'UTC'))::date;
alter table outbox add constraint outbox_pkey primary key (id, month);
alter table outbox add constraint outbox_topic_dedupe_key unique (topic, dedupe_key, month);
create index outbox_delivered_at on outbox (delivered_at) where delivered_at is not null;
create index outbox_due on outbox (available_at) where delivered_at is null and dead_at is null;
create index outbox_pending_by_key on outbox (ordering_key, id) where delivered_at is null and dead_at is null;
create index outbox_undelivered on outbox (created_at) where delivered_at is null;
create trigger outbox_payload_bytes before insert or update of payload on outbox
    for each row execute function outbox_payload_bytes();
alter table outbox attach partition outbox_legacy for values from (minvalue) to ('1970-01-02');

alter table outbox_attempts rename to outbox_attempts_legacy;
alter table outbox_attempts_legacy drop constraint outbox_attempts_pkey;
alter table outbox_attempts_legacy add constraint outbox_attempts_legacy_pkey
    primary key using index outbox_attempts_month_key;
create table outbox_attempts (like outbox_attempts_legacy including defaults including constraints)
    partition by range (month);
alter table outbox_attempts drop constraint outbox_attempts_legacy_month;
alter table outbox_attempts alter column month
    set default (date_trunc('month', now() at time zone 'UTC'))::date;
alter table outbox_attempts add constraint outbox_attempts_pkey primary key (outbox_id, attempt, month);
alter table outbox_attempts attach partition outbox_attempts_legacy
    for values from (minvalue) to ('1970-01-02');

select add_month_partition(parent, (date_trunc('month', now() at time zone 'UTC') + make_interval(months => n))::date)
from unnest(array['outbox', 'outbox_attempts']::regclass[]) as parent, generate_series(0, 2) as n;
