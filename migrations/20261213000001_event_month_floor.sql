-- The earliest month whose partition of `processed_events` can hold a copy
-- of an event its provider stamped `created` (Unix seconds): the claim
-- reads only those months and the legacy partition (docs/ARCHITECTURE.md,
-- "Partitions and the claim").
--
-- A row is written in the month it is written in, after its provider
-- created the event, and only ever moves to a later month. So no month
-- before that of `created` holds it, less a day for a provider's clock
-- ahead of the database's. An event without a time, or stamped more than a
-- day ahead of the database's now, may be in any month.
create function event_month_floor(created bigint) returns date
language sql stable parallel safe
return case
    when created is null or to_timestamp(created) > now() + interval '1 day'
        then date '1970-01-01'
    else (date_trunc('month', (to_timestamp(created) - interval '1 day') at time zone 'UTC'))::date
end;
