-- When each source's deliveries arrive, an hour at a time: what `doctor`
-- and `/metrics` (webhookd_source_last_event_timestamp_seconds,
-- webhookd_source_usual_gap_seconds) read to tell a source gone silent
-- for longer than it usually is. Written by every process that receives
-- webhooks, from a tally in memory, at most every half minute and at
-- shutdown (src/arrivals): never in a delivery's own transaction. The
-- same writes delete rows older than 35 days, except each source's last
-- 14 days of deliveries: a source silent for months still says when it
-- last delivered and how long its silences were. A few hundred rows a
-- source.
create table source_arrivals (
    source     text        not null,
    -- The hour (UTC) the deliveries arrived in.
    hour       timestamptz not null check (hour = date_trunc('hour', hour, 'UTC')),
    -- Verified deliveries, whatever became of them (a duplicate is a
    -- delivery too: the provider is sending).
    deliveries bigint      not null check (deliveries > 0),
    -- The first and the last of them: a silence runs from one hour's last
    -- to the next hour's first.
    first_at   timestamptz not null,
    last_at    timestamptz not null,
    primary key (source, hour)
);
