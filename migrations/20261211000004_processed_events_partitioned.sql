-- Monthly partitions, step 4 of 4: one short transaction that swaps the
-- table for a partitioned one. Its locks are held for milliseconds
-- whatever the table's size, since nothing is scanned, copied or indexed:
-- - today's table becomes the partition `processed_events_legacy` (the
--   key 1970-01-01 that step 1 gave every row, proved by step 2), its
--   primary key the index of step 3, its other indexes renamed;
-- - `processed_events` is made anew, partitioned by range of `month`, with
--   the same columns, defaults, checks and indexes; its rows' `month` is
--   the month (UTC) they are written in;
-- - the legacy table is attached (its check proves its rows belong, so
--   nothing is scanned, and its indexes are taken as the partitions' own),
--   and this month's partition and the next two are created.
-- The foreign key from deferred_events goes: a key into a partitioned
-- table must hold its partition key. A deferred event's row is written in
-- the transaction that defers it (events::record_claimed), and prune keeps
-- deferred rows (moving them to the current month).
alter table deferred_events drop constraint deferred_events_provider_event_id_fkey;

alter table processed_events rename to processed_events_legacy;
alter table processed_events_legacy drop constraint processed_events_pkey;
alter table processed_events_legacy add constraint processed_events_legacy_pkey
    primary key using index processed_events_month_key;
alter index processed_events_event_type rename to processed_events_legacy_event_type;
alter index processed_events_exceptions rename to processed_events_legacy_exceptions;
alter index processed_events_received_at rename to processed_events_legacy_received_at;
alter index processed_events_received_via rename to processed_events_legacy_received_via;

create table processed_events (like processed_events_legacy including defaults including constraints)
    partition by range (month);
alter table processed_events drop constraint processed_events_legacy_month;
alter table processed_events alter column month
    set default (date_trunc('month', now() at time zone 'UTC'))::date;
alter table processed_events add constraint processed_events_pkey primary key (provider, event_id, month);
create index processed_events_event_type on processed_events (event_type, received_at);
create index processed_events_exceptions on processed_events (outcome, received_at)
    where outcome <> all (array['processed', 'ignored']);
create index processed_events_received_at on processed_events (received_at);
create index processed_events_received_via on processed_events (received_via, received_at)
    where received_via <> 'webhook';
alter table processed_events attach partition processed_events_legacy
    for values from (minvalue) to ('1970-01-02');

-- Creates the partition of `parent` (a table partitioned by range of a
-- `month` date) for the month that begins on `first`, `{parent}_YYYY_MM`,
-- unless a partition covers that month already (its own, or one another
-- tool made); `true`: it did. An empty table made like the parent and
-- attached: attaching takes SHARE UPDATE EXCLUSIVE on the parent, which
-- writers' inserts never wait for (CREATE TABLE ... PARTITION OF would take
-- ACCESS EXCLUSIVE). Called by webhookd at start-up and every hour
-- (db::partitions), with a lock timeout.
create function add_month_partition(parent regclass, first date) returns boolean
    language plpgsql volatile
as $$
declare
    partition text := format('%s_%s', (select relname from pg_class where oid = parent),
                             to_char(first, 'YYYY_MM'));
begin
    if first <> date_trunc('month', first)::date then
        raise exception 'a month begins on its first day, not on %', first;
    end if;
    if exists (select from pg_partition_tree(parent) t
               where t.level = 1 and t.relid = to_regclass(quote_ident(partition))) then
        return false;
    end if;
    execute format('create table %I (like %s including defaults including constraints)',
                   partition, parent);
    execute format('alter table %s attach partition %I for values from (%L) to (%L)',
                   parent, partition, first, (first + interval '1 month')::date);
    return true;
exception
    -- another partition covers the month (42P17), or a table of that name
    -- that is not a partition of it (42P07): leave both alone
    when invalid_object_definition or duplicate_table then
        return false;
end
$$;

select add_month_partition('processed_events',
                           (date_trunc('month', now() at time zone 'UTC') + make_interval(months => n))::date)
from generate_series(0, 2) as n;
