-- Several sinks (docs/ARCHITECTURE.md, "Several sinks"): an outbox row is
-- written once for each sink whose topic patterns match its topic, and
-- carries that sink's name; its attempts, backoff, dead letter and order are
-- that sink's alone.
--
-- `outbox_sinks` is the routing every writer of outbox rows reads, whatever
-- process or command it runs in: `serve` makes it what its configuration
-- says at start (`outbox::store::routes::sync`). Until one has, the one
-- sink `default` takes every topic, as before.
create table outbox_sinks (
    name text primary key check (name ~ '^[a-z0-9_]{1,64}$'),
    -- The patterns as configured (`*` stands for any run of characters)...
    topics text[] not null,
    -- ...and as LIKE patterns, which the outbox's insert matches.
    patterns text[] not null,
    added_at timestamptz not null default now()
);
insert into outbox_sinks (name, topics, patterns) values ('default', '{*}', '{%}');

-- Every row so far is the sink `default`'s: the one sink there was. A
-- constant default: no row is rewritten.
alter table outbox add column sink text not null default 'default';

-- An event's row per topic is unique per sink now. The index is built on
-- every partition, under a lock that holds back outbox inserts (and so
-- ingest) while it builds: OPERATIONS, "Upgrading to several sinks".
alter table outbox drop constraint outbox_topic_dedupe_key;
alter table outbox add constraint outbox_topic_dedupe_key unique (topic, dedupe_key, sink, month);

-- Each sink's drainer leases its own due rows, oldest first.
drop index outbox_due;
create index outbox_due on outbox (sink, available_at) where delivered_at is null and dead_at is null;
