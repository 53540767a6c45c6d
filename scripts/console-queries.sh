#!/usr/bin/env bash
# The console's reads at scale: a scratch database (DATABASE_URL's server,
# created and dropped; else a throwaway cluster) migrated, filled with set-
# based SQL with rows shaped like the ones webhookd writes (5,000,000
# processed_events over 30 days across stripe, razorpay and paypal, their
# ledger entries, wallets, payments, subscriptions, outbox rows and deferred
# events), vacuumed and analysed; then every query the console and
# `webhookd explain` run, with representative parameters, under EXPLAIN
# (ANALYZE, BUFFERS) as a custom plan and as a generic one (PREPARE/EXECUTE
# with plan_cache_mode forced: sqlx prepares its statements, so a cached
# generic plan is what a busy pool may run). The statements are read from
# .sqlx/ (what the binary runs, never a copy), their parameter types too.
# Prints the data's shape and one markdown table: each query, its rows, the
# best of CONSOLE_REPS runs (default 3) in each plan, its buffers and the
# indexes (or sequential scans) it used.
#
#   scripts/console-queries.sh
#
# CONSOLE_EVENTS=N scales the data (default 5000000; the other tables
# follow). Migrations run through WEBHOOKD_BIN's `migrate` when it is set,
# else through psql over migrations/*.sql. CONSOLE_DB names the scratch
# database (default webhookd_console). CONSOLE_KEEP=1 keeps the database
# (and a throwaway cluster) and prints its URL; CONSOLE_DATABASE_URL=url
# only measures, on a database this script filled before. A statement
# running past CONSOLE_TIMEOUT seconds (default 30) is cancelled and shown
# as such.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

events=${CONSOLE_EVENTS:-5000000}
[ "$events" -ge 10000 ] 2>/dev/null || die "CONSOLE_EVENTS must be a number of at least 10000"
db=${CONSOLE_DB:-webhookd_console}
command -v python3 >/dev/null || die "python3 is needed (it builds and reads the EXPLAINs)"
PG_BINDIR=$(pg_bindir)
psql=("$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1)

cleanup() {
    set +e
    if [ -n "${CONSOLE_KEEP:-}" ]; then
        [ -n "${db_url:-}" ] && log "kept: $db_url"
        [ -n "${PG_CLUSTER_DIR:-}" ] && log "stop it with: $PG_BINDIR/pg_ctl -D $PG_CLUSTER_DIR stop"
        return
    fi
    if [ -n "${created:-}" ]; then drop_bench_database "$db"; fi
    stop_cluster
    if [ -n "${scratch:-}" ]; then rm -rf "$scratch"; fi
}

if [ -n "${CONSOLE_DATABASE_URL:-}" ]; then
    db_url=$CONSOLE_DATABASE_URL
else
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/$db.XXXXXX")
    chmod 755 "$scratch"
    trap cleanup EXIT
    if [ -z "${DATABASE_URL:-}" ]; then
        start_cluster "$scratch/data" shared_buffers=1GB max_wal_size=16GB checkpoint_timeout=30min
    fi
    db_url=$(bench_database "$db")
    created=1
    if [ -n "${WEBHOOKD_BIN:-}" ]; then
        log "migrating with $WEBHOOKD_BIN"
        DATABASE_URL=$db_url "$WEBHOOKD_BIN" migrate
    else
        log "migrating with psql over migrations/*.sql"
        for migration in migrations/*.sql; do "${psql[@]}" -d "$db_url" -f "$migration"; done
    fi

    # The data. Event i (1..N) is received at an even pace over the 30 days
    # before now; its provider is i mod 20 (12 stripe, 5 razorpay, 3 paypal),
    # what it is a hash of i: a credit (55%), a refund of the credit 140
    # events before it (the same provider; ~4%), a Stripe charge (its
    # payment row, `ignored` when its intent was credited) or a Razorpay or
    # PayPal failed or pending payment (15%), a subscription change (11%,
    # ~3 per subscription), an invoice (Stripe) or a type without effect.
    # 1% are imported (the oldest), 2% came by a sweep, 0.2% rejected, 1%
    # superseded; refunds in the last hour or two whose credit never came
    # wait as deferred. User ids are user_1..user_100000; user_1 has 0.5% of
    # all credits. Every id is a function of i, shaped as the provider's.
    imports=$(( events / 100 ))
    deferred_window=$(( events * 12000 / 5000000 ))
    pending_window=$(( events * 4000 / 5000000 ))
    subs_per_provider=$(( events / 75 ))
    log "loading $events events and what they wrote"
    started=$(date +%s)
    # The settings of every session that loads.
    settings=$(cat <<'SQL'
\timing on
set synchronous_commit = off;
set client_min_messages = warning;
set work_mem = '256MB';
set maintenance_work_mem = '512MB';
-- Every scan of the staging table from its first page: the rows go in in event order.
set synchronize_seqscans = off;
SQL
    )
    { printf '%s\n' "$settings"; cat <<SQL
create schema console_load;
create table console_load.conf as select now() as t_end;
create function console_load.h(i bigint, seed bigint) returns bigint
    language sql immutable parallel safe return abs(hashint8extended(i, seed));
-- Up to 32 hex digits (lower case, or upper as PayPal's ids) named by x.
create function console_load.hx(x text, n int) returns text
    language sql immutable parallel safe
    return substr(to_hex(hashtextextended(x, 1) | (1::bigint << 62))
                  || to_hex(hashtextextended(x, 2) | (1::bigint << 62)), 1, n);
create function console_load.up(x text, n int) returns text
    language sql immutable parallel safe return upper(console_load.hx(x, n));
create function console_load.cat(i bigint) returns bigint
    language sql immutable parallel safe return console_load.h(i, 1) % 1000;
-- A credit that posted (not imported, rejected or owned by another event).
create function console_load.good(i bigint) returns boolean
    language sql immutable parallel safe return i > ${imports} and console_load.cat(i) between 6 and 559;
create function console_load.evt(p text, i bigint) returns text
    language sql immutable parallel safe return case p
        when 'stripe' then 'evt_1' || console_load.hx('e' || i, 22)
        when 'razorpay' then 'evt_' || console_load.hx('r' || i, 14)
        else 'WH-' || console_load.up('w' || i, 17) || '-' || console_load.up('x' || i, 17) end;
-- The credit's key: a PaymentIntent, a Razorpay payment, a PayPal capture.
create function console_load.pay(p text, i bigint) returns text
    language sql immutable parallel safe return case p
        when 'stripe' then 'pi_3' || console_load.hx('pi' || i, 22)
        when 'razorpay' then 'pay_' || console_load.hx('pay' || i, 14)
        else console_load.up('cap' || i, 17) end;
create function console_load.charge(i bigint) returns text
    language sql immutable parallel safe return 'ch_3' || console_load.hx('ch' || i, 22);
create function console_load.ord(p text, i bigint) returns text
    language sql immutable parallel safe return case p
        when 'razorpay' then 'order_' || console_load.hx('o' || i, 14) else console_load.up('ord' || i, 17) end;
create function console_load.rfnd(p text, i bigint) returns text
    language sql immutable parallel safe return case p
        when 'razorpay' then 'rfnd_' || console_load.hx('rf' || i, 14) else console_load.up('ref' || i, 17) end;
create function console_load.sub(p text, s bigint) returns text
    language sql immutable parallel safe return case p
        when 'stripe' then 'sub_1' || console_load.hx('s' || s, 22)
        when 'razorpay' then 'sub_' || console_load.hx('rs' || s, 14)
        else 'I-' || console_load.up('ps' || s, 12) end;
create function console_load.usr(i bigint) returns text
    language sql immutable parallel safe return 'user_' || case
        when console_load.h(i, 3) % 200 = 0 then 1 else 1 + console_load.h(i, 4) % 100000 end;
create function console_load.sub_user(s bigint) returns text
    language sql immutable parallel safe return 'user_' || case
        when s < 3 then 1 else 1 + console_load.h(s, 7) % 100000 end;
create function console_load.cur(p text, i bigint) returns text
    language sql immutable parallel safe return case when p = 'stripe' then 'USD' when p = 'razorpay' then 'INR'
        when console_load.h(i, 2) % 4 = 0 then 'EUR' else 'USD' end;
create function console_load.amt(i bigint) returns bigint
    language sql immutable parallel safe return 100 + console_load.h(i, 9) % 50000;

-- One row per event: what it is, the payment it names (pj), when.
create unlogged table console_load.ev as
select b.*,
       console_load.evt(p, i) as evt,
       case
        when kind in ('imported', 'rejected', 'owned', 'credit') then case p
            when 'stripe' then 'payment_intent.succeeded' when 'razorpay' then 'payment.captured'
            else 'PAYMENT.CAPTURE.COMPLETED' end
        when kind in ('refund', 'deferred') then case p
            when 'stripe' then 'charge.refunded' when 'razorpay' then 'refund.processed'
            else 'PAYMENT.CAPTURE.REFUNDED' end
        when kind = 'charge' then 'charge.succeeded'
        when kind = 'failed' then case when p = 'razorpay' then 'payment.failed'
            when v < 5 then 'PAYMENT.CAPTURE.DENIED' else 'PAYMENT.CAPTURE.PENDING' end
        when kind in ('sub', 'superseded') then case p
            when 'stripe' then case v when 0 then 'customer.subscription.created'
                when 1 then 'customer.subscription.deleted' else 'customer.subscription.updated' end
            when 'razorpay' then case v when 0 then 'subscription.activated'
                when 1 then 'subscription.cancelled' else 'subscription.charged' end
            else case v when 0 then 'BILLING.SUBSCRIPTION.ACTIVATED'
                when 1 then 'BILLING.SUBSCRIPTION.CANCELLED' else 'BILLING.SUBSCRIPTION.UPDATED' end end
        when kind = 'invoice' then 'invoice.paid'
        else case p
            when 'stripe' then case v % 3 when 0 then 'customer.created' when 1 then 'invoice.created'
                else 'payment_intent.created' end
            when 'razorpay' then 'order.paid' else 'CHECKOUT.ORDER.APPROVED' end end as event_type,
       case kind
        when 'imported' then 'imported' when 'rejected' then 'rejected' when 'owned' then 'ignored'
        when 'credit' then 'processed' when 'refund' then 'processed' when 'deferred' then 'deferred'
        when 'charge' then case when pj <> i then 'ignored' else 'processed' end
        when 'failed' then 'processed' when 'sub' then 'processed' when 'superseded' then 'superseded'
        when 'invoice' then 'processed' else 'ignored' end as outcome
from (
    select g.i, p.p, k.kind, x.pj, x.at, y.v, y.s,
           case when k.kind = 'refund' then
               case when y.v % 3 = 0 then console_load.amt(x.pj) else console_load.amt(x.pj) / 2 end end as ramt,
           case when g.i <= ${imports} then 'import' when console_load.h(g.i, 8) % 100 < 2 then 'sweep'
                else 'webhook' end as via
    from generate_series(1, ${events}) g (i)
    cross join console_load.conf c
    cross join lateral (select case when g.i % 20 < 12 then 'stripe' when g.i % 20 < 17 then 'razorpay'
                                    else 'paypal' end as p,
                               console_load.cat(g.i) as cat) p
    cross join lateral (select case
            when g.i <= ${imports} then 'imported'
            when p.cat < 2 then 'rejected'
            when p.cat < 6 then 'owned'
            when p.cat < 560 then 'credit'
            when p.cat < 633 then case when console_load.good(g.i - 140) then 'refund'
                                       when g.i > ${events} - ${deferred_window} then 'deferred' else 'other' end
            when p.cat < 780 then case when p.p = 'stripe' then 'charge' else 'failed' end
            when p.cat < 790 then 'superseded'
            when p.cat < 900 then 'sub'
            when p.cat < 980 or p.p <> 'stripe' then 'other'
            else 'invoice' end as kind) k
    cross join lateral (select case when k.kind in ('refund', 'deferred') then g.i - 140
                                    when k.kind = 'charge' and console_load.good(g.i - 20) then g.i - 20
                                    else g.i end as pj,
                               c.t_end - (1 - g.i::float8 / ${events}) * interval '30 days'
                                   + (console_load.h(g.i, 14) % 400000 - 200000) * interval '1 microsecond' as at) x
    cross join lateral (select console_load.h(g.i, 11) % 10 as v,
                               console_load.h(g.i, 6) % ${subs_per_provider} as s) y
) b;

SQL
    } | "${psql[@]}" -d "$db_url" >&2
    # Two streams, one a core: the events (and what waits on them), and
    # everything else; each table is written by one statement, in event order.
    { printf '%s\n' "$settings"; cat <<SQL
\warn ==> processed_events
-- Each event in its month's partition, as webhookd writes them: the 30 days
-- span this month's and the one or two before it.
select add_month_partition('processed_events', (date_trunc('month', t_end at time zone 'UTC') - make_interval(months => n))::date)
from console_load.conf, generate_series(1, 2) as n;
insert into processed_events
    (provider, event_id, event_type, outcome, detail, payload, provider_created_at, received_at, received_via,
     month)
select e.p, e.evt, e.event_type, e.outcome,
       case e.kind
           when 'credit' then jsonb_build_object('entry_id', e.i, 'balance_minor', console_load.amt(e.i),
               'outbox_id', e.i, 'applied_deferred', '[]'::jsonb)
           when 'refund' then jsonb_build_object('entry_id', e.i, 'debited_minor', e.ramt,
               'balance_minor', console_load.amt(e.pj) - e.ramt, 'outbox_id', e.i)
           when 'charge' then case when e.pj <> e.i
               then jsonb_build_object('reason', 'the payment intent was already credited',
                   'owner_event_id', console_load.evt(e.p, e.pj), 'receipt_outbox_id', e.i)
               else jsonb_build_object('outbox_id', e.i) end
           when 'failed' then jsonb_build_object('payment_id', console_load.pay(e.p, e.i))
           when 'sub' then jsonb_build_object('outbox_id', e.i)
           when 'invoice' then jsonb_build_object('outbox_id', e.i)
           when 'superseded' then jsonb_build_object('reason', 'older than the stored state',
               'stored_event_time', extract(epoch from e.at)::bigint + 60, 'stored_status', 'active')
           when 'owned' then jsonb_build_object('reason', 'this payment was already credited',
               'owner_event_id', console_load.evt(e.p, e.i - 20))
           when 'rejected' then jsonb_build_object('reason', case e.p
               when 'stripe' then 'payment intent has no metadata.user_id'
               when 'razorpay' then 'payment has no notes.user_id' else 'capture has no custom_id' end)
           when 'deferred' then jsonb_build_object('waits_for', console_load.pay(e.p, e.pj))
           when 'imported' then jsonb_build_object('imported', true)
           else jsonb_build_object('reason', 'event type has no effect') end,
       case e.p
           when 'stripe' then jsonb_build_object('id', e.evt, 'object', 'event', 'api_version', '2024-06-20',
               'created', extract(epoch from e.at)::bigint - 1, 'livemode', true, 'type', e.event_type,
               'pending_webhooks', 1, 'data', jsonb_build_object('object', case
                   when e.kind in ('charge', 'refund', 'deferred') then jsonb_build_object(
                       'id', console_load.charge(e.pj), 'object', 'charge', 'amount', console_load.amt(e.pj),
                       'amount_refunded', coalesce(e.ramt, 0), 'currency', 'usd',
                       'payment_intent', console_load.pay(e.p, e.pj), 'status', 'succeeded', 'paid', true,
                       'metadata', jsonb_build_object('user_id', console_load.usr(e.pj)))
                   when e.kind in ('sub', 'superseded') then jsonb_build_object(
                       'id', console_load.sub(e.p, e.s), 'object', 'subscription',
                       'customer', 'cus_' || console_load.hx('c' || e.s, 14),
                       'status', case e.v when 1 then 'canceled' when 2 then 'past_due' else 'active' end,
                       'current_period_end', extract(epoch from e.at)::bigint + 2592000,
                       'items', jsonb_build_object('data', jsonb_build_array(jsonb_build_object(
                           'price', jsonb_build_object('id', 'price_' || (e.s % 7))))),
                       'metadata', jsonb_build_object('user_id', console_load.sub_user(e.s)))
                   when e.kind = 'invoice' then jsonb_build_object(
                       'id', 'in_1' || console_load.hx('in' || e.i, 22), 'object', 'invoice',
                       'customer', 'cus_' || console_load.hx('c' || e.s, 14),
                       'subscription', console_load.sub(e.p, e.s), 'amount_paid', console_load.amt(e.i),
                       'currency', 'usd', 'metadata', jsonb_build_object('user_id', console_load.sub_user(e.s)))
                   when e.kind = 'other' then jsonb_build_object(
                       'id', 'cus_' || console_load.hx('c' || e.i, 14), 'object', 'customer')
                   else jsonb_build_object(
                       'id', console_load.pay(e.p, e.pj), 'object', 'payment_intent',
                       'amount', console_load.amt(e.pj), 'amount_received', console_load.amt(e.pj),
                       'currency', 'usd', 'status', 'succeeded',
                       'metadata', case when e.kind = 'rejected' then '{}'::jsonb
                           else jsonb_build_object('user_id', console_load.usr(e.pj)) end) end))
           when 'razorpay' then jsonb_build_object('entity', 'event', 'account_id', 'acc_BFQ7uQEaa7j2z7',
               'event', e.event_type, 'created_at', extract(epoch from e.at)::bigint - 1,
               'contains', case when e.kind in ('sub', 'superseded') then '["subscription"]'::jsonb
                   when e.kind in ('refund', 'deferred') then '["refund", "payment"]'::jsonb
                   else '["payment"]'::jsonb end,
               'payload', case
                   when e.kind in ('sub', 'superseded') then jsonb_build_object('subscription',
                       jsonb_build_object('entity', jsonb_build_object(
                           'id', console_load.sub(e.p, e.s), 'entity', 'subscription',
                           'plan_id', 'plan_' || console_load.hx('pl' || (e.s % 7), 14),
                           'customer_id', 'cust_' || console_load.hx('c' || e.s, 14),
                           'status', case e.v when 1 then 'cancelled' else 'active' end,
                           'current_end', extract(epoch from e.at)::bigint + 2592000,
                           'notes', jsonb_build_object('user_id', console_load.sub_user(e.s)))))
                   when e.kind in ('refund', 'deferred') then jsonb_build_object(
                       'refund', jsonb_build_object('entity', jsonb_build_object(
                           'id', console_load.rfnd(e.p, e.i), 'entity', 'refund',
                           'payment_id', console_load.pay(e.p, e.pj), 'amount', coalesce(e.ramt, 100),
                           'currency', 'INR', 'status', 'processed')),
                       'payment', jsonb_build_object('entity', jsonb_build_object(
                           'id', console_load.pay(e.p, e.pj), 'entity', 'payment',
                           'amount', console_load.amt(e.pj), 'amount_refunded', coalesce(e.ramt, 100),
                           'currency', 'INR', 'status', 'refunded', 'order_id', console_load.ord(e.p, e.pj),
                           'notes', jsonb_build_object('user_id', console_load.usr(e.pj)))))
                   else jsonb_build_object('payment', jsonb_build_object('entity', jsonb_build_object(
                       'id', console_load.pay(e.p, e.pj), 'entity', 'payment', 'amount', console_load.amt(e.pj),
                       'currency', 'INR', 'status', case when e.kind = 'failed' then 'failed' else 'captured' end,
                       'order_id', console_load.ord(e.p, e.pj), 'method', 'upi', 'captured', e.kind <> 'failed',
                       'notes', case when e.kind = 'rejected' then '[]'::jsonb
                           else jsonb_build_object('user_id', console_load.usr(e.pj)) end))) end)
           else jsonb_build_object('id', e.evt, 'event_version', '1.0',
               'create_time', to_char(e.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
               'resource_type', case when e.kind in ('sub', 'superseded') then 'subscription'
                   when e.kind in ('refund', 'deferred') then 'refund' else 'capture' end,
               'event_type', e.event_type, 'summary', 'Payment event',
               'resource', case
                   when e.kind in ('sub', 'superseded') then jsonb_build_object(
                       'id', console_load.sub(e.p, e.s),
                       'plan_id', 'P-' || console_load.up('pl' || (e.s % 7), 24),
                       'status', case e.v when 1 then 'CANCELLED' else 'ACTIVE' end,
                       'custom_id', console_load.sub_user(e.s),
                       'billing_info', jsonb_build_object('next_billing_time',
                           to_char((e.at + interval '30 days') at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')))
                   when e.kind in ('refund', 'deferred') then jsonb_build_object(
                       'id', console_load.rfnd(e.p, e.i),
                       'amount', jsonb_build_object('currency_code', console_load.cur(e.p, e.pj),
                           'value', to_char(coalesce(e.ramt, 100) / 100.0, 'FM999990.00')),
                       'status', 'COMPLETED',
                       'links', jsonb_build_array(jsonb_build_object('rel', 'up', 'method', 'GET',
                           'href', 'https://api.paypal.com/v2/payments/captures/' || console_load.pay(e.p, e.pj))))
                   when e.kind = 'other' then jsonb_build_object('id', console_load.ord(e.p, e.i),
                       'intent', 'CAPTURE', 'status', 'APPROVED')
                   else jsonb_build_object('id', console_load.pay(e.p, e.pj),
                       'amount', jsonb_build_object('currency_code', console_load.cur(e.p, e.pj),
                           'value', to_char(console_load.amt(e.pj) / 100.0, 'FM999990.00')),
                       'custom_id', case when e.kind <> 'rejected' then console_load.usr(e.pj) end,
                       'status', case when e.kind <> 'failed' then 'COMPLETED' when e.v < 5 then 'DECLINED'
                           else 'PENDING' end,
                       'final_capture', true,
                       'supplementary_data', jsonb_build_object('related_ids',
                           jsonb_build_object('order_id', console_load.ord(e.p, e.pj)))) end) end,
       e.at - interval '1500 milliseconds', e.at, e.via, (date_trunc('month', e.at at time zone 'UTC'))::date
from console_load.ev e;

\warn ==> deferred_events
insert into deferred_events (provider, event_id, waits_for, created_at)
select p, evt, console_load.pay(p, pj), at from console_load.ev where kind = 'deferred';
vacuum analyze processed_events, deferred_events;
SQL
    } | "${psql[@]}" -d "$db_url" >&2 &
    events_pid=$!
    { printf '%s\n' "$settings"; cat <<SQL
\warn ==> subscriptions, sweeps
insert into subscriptions (provider, subscription_id, customer_id, user_id, status, plan_id,
                           current_period_end, provider_updated_at, event_id, updated_at)
select distinct on (p, s) p, console_load.sub(p, s),
       case p when 'stripe' then 'cus_' || console_load.hx('c' || s, 14)
              when 'razorpay' then 'cust_' || console_load.hx('c' || s, 14) end,
       console_load.sub_user(s),
       case p when 'paypal' then case v when 1 then 'CANCELLED' else 'ACTIVE' end
              when 'razorpay' then case v when 1 then 'cancelled' else 'active' end
              else case v when 1 then 'canceled' when 2 then 'past_due' else 'active' end end,
       case p when 'stripe' then 'price_' || (s % 7)
              when 'razorpay' then 'plan_' || console_load.hx('pl' || (s % 7), 14)
              else 'P-' || console_load.up('pl' || (s % 7), 24) end,
       at + interval '30 days', at, evt, at
from console_load.ev where kind = 'sub'
order by p, s, i desc;

insert into sweeps (provider, swept_until, last_run_at, last_success_at, last_result)
select p, t_end - interval '5 minutes', t_end - interval '4 minutes', t_end - interval '4 minutes',
       jsonb_build_object('listed', 100, 'applied', 1, 'duplicates', 99)
from console_load.conf, unnest(array['stripe', 'razorpay', 'paypal']) p;

\warn ==> wallets, wallet_entries
insert into wallets (user_id, currency, balance_minor, updated_at)
select distinct console_load.usr(pj), console_load.cur(p, pj), 0::bigint, now()
from console_load.ev where kind = 'credit';

insert into wallet_entries
    (user_id, currency, amount_minor, kind, provider, source_ref, event_id, parent_ref, created_at)
select console_load.usr(pj), console_load.cur(p, pj),
       case kind when 'credit' then console_load.amt(pj) else -ramt end,
       case kind when 'credit' then 'credit' else 'refund' end, p,
       case when kind = 'credit' then console_load.pay(p, pj)
            when p = 'stripe' then console_load.charge(pj) || ':' || ramt
            else console_load.rfnd(p, i) end,
       evt, case when kind = 'refund' then console_load.pay(p, pj) end, at
from console_load.ev where kind in ('credit', 'refund');

update wallets w set balance_minor = s.total, updated_at = s.at
from (select user_id, currency, sum(amount_minor)::bigint as total, max(created_at) as at
      from wallet_entries group by 1, 2) s
where w.user_id = s.user_id and w.currency = s.currency;

\warn ==> payments
insert into payments (provider, payment_id, payment_ref, user_id, amount_minor, currency, status,
                      refunded_minor, provider_created_at, event_id, updated_at)
select p,
       case when kind = 'charge' then console_load.charge(pj) else console_load.pay(p, pj) end,
       case when kind = 'charge' then console_load.pay(p, pj) else console_load.ord(p, pj) end,
       console_load.usr(pj), console_load.amt(pj), console_load.cur(p, pj),
       case when kind = 'charge' then 'succeeded'
            when kind = 'credit' then case p when 'razorpay' then 'captured' else 'completed' end
            when p = 'razorpay' then 'failed' when v < 5 then 'declined' else 'pending' end,
       0, at - interval '2 seconds', evt, at
from console_load.ev
where (kind = 'credit' and p <> 'stripe') or kind in ('charge', 'failed');

-- A refund moves its payment's row (a Stripe charge's is written by the
-- refund when its charge.succeeded never came).
insert into payments (provider, payment_id, payment_ref, user_id, amount_minor, currency, status,
                      refunded_minor, provider_created_at, event_id, updated_at)
select p,
       case when p = 'stripe' then console_load.charge(pj) else console_load.pay(p, pj) end,
       case when p = 'stripe' then console_load.pay(p, pj) else console_load.ord(p, pj) end,
       console_load.usr(pj), console_load.amt(pj), console_load.cur(p, pj),
       case when ramt = console_load.amt(pj) then 'refunded' else 'partially_refunded' end,
       ramt, at - interval '2 seconds', null, at
from console_load.ev where kind = 'refund'
on conflict (provider, payment_id) do update
    set refunded_minor = excluded.refunded_minor, status = excluded.status, updated_at = excluded.updated_at;

\warn ==> outbox
-- Delivered within a second, a few after a retry; the newest still pending
-- (the sink has been failing for the last half hour or so), one in 1,400
-- dead after its attempts.
select add_month_partition('outbox', (date_trunc('month', t_end at time zone 'UTC') - make_interval(months => n))::date)
from console_load.conf, generate_series(1, 2) as n;
insert into outbox (topic, dedupe_key, provider, event_id, payload, created_at, available_at, attempts,
                    last_error, delivered_at, dead_at, ordering_key, month)
select o.topic, o.p || ':' || o.evt, o.p, o.evt, o.payload, o.created,
       case o.state when 'dead' then o.created + interval '6 hours'
            when 'pending' then o.created + o.tries * interval '30 seconds' else o.created end,
       case o.state when 'dead' then 12 when 'pending' then o.tries
            else 1 + (console_load.h(o.i, 21) % 50 = 0)::int end,
       case when o.state = 'dead' or (o.state = 'pending' and o.tries > 0)
                 or (o.state = 'delivered' and console_load.h(o.i, 21) % 50 = 0)
            then (array['HTTP 500', 'HTTP 503', 'HTTP 410',
                        'timed out: error sending request: operation timed out',
                        'connection failed: error sending request: client error (Connect): tcp connect error: Connection refused (os error 111)'])
                 [(1 + console_load.h(o.i, 22) % 5)::int] end,
       case when o.state = 'delivered' then o.created
            + (20 + console_load.h(o.i, 23) % 300) * interval '1 millisecond'
            + (console_load.h(o.i, 21) % 50 = 0)::int * interval '30 seconds' end,
       case when o.state = 'dead' then o.created + interval '6 hours' end,
       o.okey, (date_trunc('month', o.created at time zone 'UTC'))::date
from (select e.i, e.p, e.evt, e.at + interval '3 milliseconds' as created,
             console_load.h(e.i, 24) % 4 as tries,
             case when e.i > ${events} - ${pending_window} then 'pending'
                  when console_load.h(e.i, 20) % 1400 = 0 then 'dead' else 'delivered' end as state,
             case e.kind when 'credit' then 'wallet.credited' when 'refund' then 'wallet.debited'
                  when 'charge' then 'payment.receipt' when 'sub' then 'subscription.changed'
                  else 'invoice.paid' end as topic,
             case when e.kind in ('credit', 'refund')
                      then 'wallet:' || console_load.usr(e.pj) || ':' || console_load.cur(e.p, e.pj)
                  when e.kind = 'charge' then 'stripe:payment:' || console_load.charge(e.pj)
                  when e.kind = 'sub' then e.p || ':subscription:' || console_load.sub(e.p, e.s)
                  else e.p || ':' || e.evt end as okey,
             case e.kind
                 when 'credit' then jsonb_build_object('user_id', console_load.usr(e.pj),
                     'currency', console_load.cur(e.p, e.pj), 'amount_minor', console_load.amt(e.pj),
                     'balance_minor', console_load.amt(e.pj), 'entry_id', e.i,
                     'payment_id', console_load.pay(e.p, e.pj))
                 when 'refund' then jsonb_build_object('user_id', console_load.usr(e.pj),
                     'currency', console_load.cur(e.p, e.pj), 'amount_minor', e.ramt,
                     'balance_minor', console_load.amt(e.pj) - e.ramt, 'entry_id', e.i,
                     'payment_id', console_load.pay(e.p, e.pj))
                 when 'charge' then jsonb_build_object('payment_id', console_load.charge(e.pj),
                     'payment_intent', console_load.pay(e.p, e.pj), 'user_id', console_load.usr(e.pj),
                     'amount_minor', console_load.amt(e.pj), 'currency', 'USD', 'status', 'succeeded')
                 when 'sub' then jsonb_build_object('subscription_id', console_load.sub(e.p, e.s),
                     'user_id', console_load.sub_user(e.s), 'status', 'active', 'previous_status', 'active',
                     'plan_id', 'price_' || (e.s % 7),
                     'current_period_end', extract(epoch from e.at)::bigint + 2592000)
                 else jsonb_build_object('invoice_id', 'in_1' || console_load.hx('in' || e.i, 22),
                     'subscription_id', console_load.sub(e.p, e.s), 'user_id', console_load.sub_user(e.s),
                     'amount_paid_minor', console_load.amt(e.i), 'currency', 'USD') end as payload
      from console_load.ev e
      where e.kind in ('credit', 'refund', 'charge', 'sub', 'invoice')) o;

vacuum analyze subscriptions, sweeps, wallets, wallet_entries, payments, outbox;
SQL
    } | "${psql[@]}" -d "$db_url" >&2 &
    rest_pid=$!
    wait "$events_pid" || die "loading the events failed"
    wait "$rest_pid" || die "loading the ledger, payments and outbox failed"
    "${psql[@]}" -d "$db_url" -c "set client_min_messages = warning" -c "drop schema console_load cascade" \
        -c "analyze" >&2
    log "loaded in $(( $(date +%s) - started )) s (vacuum and analyze included)"
fi

log "measuring"
python3 - "$PG_BINDIR/psql" "$db_url" "${CONSOLE_REPS:-3}" "${CONSOLE_TIMEOUT:-30}" <<'PY'
import glob, json, re, subprocess, sys

psql, url, reps, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def run_psql(text):
    done = subprocess.run([psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-F", "\t", "-d", url],
                          input=text, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"console-queries: psql failed:\n{done.stderr}\n--- input ---\n{text[:4000]}")
    return done.stdout

def rows(query):
    return [line.split("\t") for line in run_psql(query + ";\n").splitlines() if line]

def one(query):
    found = rows(query)
    if not found:
        sys.exit(f"console-queries: no row for {query}")
    return found[0]

# The statements as the binary runs them, and their parameter types.
TYPES = {"Text": "text", "Int8": "int8", "Int4": "int4", "Float8": "float8", "Bool": "bool"}
stored = []
for path in glob.glob(".sqlx/query-*.json"):
    with open(path) as f:
        stored.append(json.load(f))

def statement(marker):
    found = [q for q in stored if marker in q["query"]]
    if len(found) > 1:
        # Of statements that share a beginning, the one that ends there.
        found = [q for q in found if q["query"].rstrip().endswith(marker.rstrip())] or found
    if len(found) != 1:
        sys.exit(f"console-queries: {len(found)} queries in .sqlx/ contain {marker!r}, not 1")
    return found[0]["query"], [TYPES[t] for t in found[0]["describe"]["parameters"].get("Left", [])]

# Statements the source runs in a transaction begun with db::BEGIN_LOOKUP:
# planned for their parameters every time, never as a cached generic plan,
# and measured here under its settings too.
sources = {}
for path in glob.glob("src/**/*.rs", recursive=True):
    with open(path) as f:
        sources[path] = f.read()
found = re.search(r'pub const BEGIN_LOOKUP: &str =\s*"([^"]*)"', sources["src/db/mod.rs"])
if not found:
    sys.exit("console-queries: no BEGIN_LOOKUP in src/db/mod.rs")
LOOKUP = [part.strip() + ";" for part in found.group(1).split(";") if part.strip().startswith("set local")]

def lookup(marker):
    for text in sources.values():
        at = text.find(marker)
        if at >= 0:
            start = text.rfind("pub async fn", 0, at)
            body = text[start:at]
            return "BEGIN_LOOKUP" in body or "db::lookup(" in body
    sys.exit(f"console-queries: no source file holds {marker!r}")

def lit(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"

# The data's shape.
print("| table | rows | heap + indexes |")
print("|---|---|---|")
for table in ("processed_events", "wallet_entries", "wallets", "payments", "subscriptions", "outbox",
              "deferred_events"):
    # a partitioned table's size is its partitions'
    count, size = one(f"select (select count(*) from {table}), "
                      f"pg_size_pretty(sum(pg_table_size(relid))) || ' + ' || "
                      f"pg_size_pretty(sum(pg_indexes_size(relid))) from pg_partition_tree('{table}')")
    print(f"| {table} | {int(count):,} | {size} |")
print()
for line in rows("select outcome, count(*) from processed_events group by 1 order by 2 desc"):
    print(f"outcome {line[0]}: {int(line[1]):,}", end="; ")
print()
for line in rows("select received_via, count(*) from processed_events group by 1 order by 2 desc"):
    print(f"via {line[0]}: {int(line[1]):,}", end="; ")
print()
for line in rows("select case when delivered_at is not null then 'delivered' when dead_at is not null then 'dead' "
                 "else 'pending' end, count(*) from outbox group by 1 order by 2 desc"):
    print(f"outbox {line[0]}: {int(line[1]):,}", end="; ")
print()
print()

# Representative parameters, read from the data.
heavy = "user_1"
heavy_entries, = one(f"select count(*) from wallet_entries where user_id = '{heavy}'")
max_epoch, = one("select extract(epoch from max(received_at))::float8 from processed_events")
max_epoch = float(max_epoch)
credit_provider, credit_event, user = one(
    "select provider, event_id, user_id from wallet_entries where provider = 'stripe' and kind = 'credit' "
    "and user_id <> 'user_1' order by id desc offset 1000 limit 1")
user_entries, = one(f"select count(*) from wallet_entries where user_id = '{user}'")
charge_provider, charge_event = one(
    "select provider, event_id from payments where provider = 'stripe' and status = 'succeeded' "
    "and event_id is not null limit 1")
rzp_payment, = one("select payment_id from payments where provider = 'razorpay' "
                   "and status = 'partially_refunded' limit 1")
refund_charge, = one("select split_part(source_ref, ':', 1) from wallet_entries "
                     "where provider = 'stripe' and kind = 'refund' order by id desc limit 1")
sub_provider, subscription, sub_event = one(
    "select provider, subscription_id, event_id from subscriptions where provider = 'stripe' "
    "and user_id <> 'user_1' limit 1")
unknown = "evt_1NoSuchEventAnywhere00000"
CURSOR = "to_char(received_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), provider, event_id"
page20 = one(f"select {CURSOR} from processed_events "
             "order by received_at desc, provider desc, event_id desc offset 949 limit 1")
page20_rzp = one(f"select {CURSOR} from processed_events where provider = 'razorpay' "
                 "order by received_at desc, provider desc, event_id desc offset 949 limit 1")
dead_max, = one("select max(id) from outbox where dead_at is not null and delivered_at is null")
dead_count, = one("select count(*) from outbox where dead_at is not null and delivered_at is null")
dead_after, = one("select id from outbox where dead_at is not null and delivered_at is null "
                  f"order by id offset {min(49, int(dead_count) // 2)} limit 1")
dead_one, = one("select id from outbox where dead_at is not null and delivered_at is null "
                f"order by id desc offset {min(10, int(dead_count) // 2)} limit 1")
hour_since = int(max_epoch) // 60 * 60 - 59 * 60
day_since = int(max_epoch) // 900 * 900 - 95 * 900
day_from = max_epoch - 3 * 86400

# the search's two constants, as the binary has them
WALKED = [int(re.search(rf"const {name}: i64 = ([0-9_]+);", sources["src/events/browse.rs"]).group(1).replace("_", ""))
          for name in ("WALKED_RELATED", "WALKED_EVENTS")]

def page(provider=None, event_type=None, outcome=None, via=None, start=None, end=None, cursor=None, q=None):
    args = [provider, event_type, outcome, via, start, end, *(cursor or (None, None, None)), 50]
    return args + [q, *WALKED]

# the list and the search are one statement
LIST = SEARCH = "select distinct r.provider, r.event_id from related_events($11) r where $11::text is not null"
STORY = "related as (select distinct provider, event_id from related_events($1))"
cases = [
    ("events::page", "first page, no filter", LIST, page()),
    ("events::page", "provider = paypal", LIST, page(provider="paypal")),
    ("events::page", "outcome = rejected", LIST, page(outcome="rejected")),
    ("events::page", "outcome = rejected, provider = paypal", LIST, page(provider="paypal", outcome="rejected")),
    ("events::page", "outcome = deferred", LIST, page(outcome="deferred")),
    ("events::page", "event_type = charge.refunded", LIST, page(event_type="charge.refunded")),
    ("events::page", "event_type = an unknown type", LIST, page(event_type="charge.exploded")),
    ("events::page", "received_via = sweep", LIST, page(via="sweep")),
    ("events::page", "received_via = import (the oldest 1%)", LIST, page(via="import")),
    ("events::page", "outcome = imported (the oldest 1%)", LIST, page(outcome="imported")),
    ("events::page", "one day, three days ago", LIST, page(start=day_from, end=day_from + 86400)),
    ("events::page", "20th page (cursor)", LIST, page(cursor=page20)),
    ("events::page", "provider = razorpay, 20th page", LIST, page(provider="razorpay", cursor=page20_rzp)),
    ("events::page q", "q = an event id", SEARCH, page(q=credit_event)),
    ("events::page q", f"q = {heavy} ({int(heavy_entries):,} entries)", SEARCH, page(q=heavy)),
    ("events::page q", f"q = a user ({int(user_entries)} entries)", SEARCH, page(q=user)),
    ("events::page q", "q = a Razorpay payment id", SEARCH, page(q=rzp_payment)),
    ("events::page q", "q = a refunded Stripe charge id", SEARCH, page(q=refund_charge)),
    ("events::page q", "q = a subscription id", SEARCH, page(q=subscription)),
    ("events::page q", "q = an unknown id", SEARCH, page(q=unknown)),
    ("events::page q", f"q = {heavy}, outcome = rejected", SEARCH, page(outcome="rejected", q=heavy)),
    ("events::counts_by_outcome", "last hour by minute", 'as "bucket!"', [hour_since, 60]),
    ("events::counts_by_outcome", "last day by 15 minutes", 'as "bucket!"', [day_since, 900]),
    ("events::deferred", "200 longest waiting", "from deferred_events d join processed_events e using", [200]),
    ("events::deferred_depth", "", 'min(created_at)), 0)::float8 as "oldest!"\n        from deferred_events', []),
    ("events::owner_waits", "", "from deferred_events\n        where starts_with(waits_for, 'owner:')\n", []),
    ("events::preview", "an event, 4,096 characters", 'left(payload::text, $3) as "payload_head!"',
     [credit_provider, credit_event, 4096]),
    ("outbox browse::page", "pending, first page", "and id > coalesce($4::bigint, 0)", [False, None, None, None, 50, None]),
    ("outbox browse::page", "dead, first page", "and id > coalesce($4::bigint, 0)", [True, None, None, None, 50, None]),
    ("outbox browse::page", "dead, second page", "and id > coalesce($4::bigint, 0)",
     [True, None, None, int(dead_after), 50, None]),
    ("outbox browse::page", "dead, error ~ 'timed out'", "and id > coalesce($4::bigint, 0)",
     [True, None, "timed out", None, 50, None]),
    ("outbox browse::page", "all undelivered, topic = subscription.changed", "and id > coalesce($4::bigint, 0)",
     [None, "subscription.changed", None, None, 50, None]),
    ("outbox browse::of_event", "an event", "when o.delivered_at is not null then 'delivered'",
     [credit_provider, credit_event]),
    ("outbox browse::count_dead", "all", "max(id) as max_id", [None, None, None]),
    ("outbox browse::count_dead", "error ~ 'HTTP 410'", "max(id) as max_id", [None, "HTTP 410", None]),
    ("outbox browse::count_dead", "topic = wallet.credited", "max(id) as max_id", ["wallet.credited", None, None]),
    ("outbox browse::retry_dead_matching", "error ~ 'HTTP 410' (rolled back)",
     "set dead_at = null, requeued_attempts = attempts", [None, "HTTP 410", None, int(dead_max), None, None]),
    ("outbox browse::retry_dead_matching", "one id (rolled back)",
     "set dead_at = null, requeued_attempts = attempts", [None, None, int(dead_one), 2**63 - 1, None, None]),
    ("outbox store::depth", "", 'as "pending!"', []),
    ("ledger::wallets_of_user", heavy, "from wallets where user_id = $1\n        order by currency", [heavy]),
    ("ledger::entries_of_user", f"{heavy}, 100", "from wallet_entries where user_id = $1", [heavy, 100]),
    ("ledger::entries_of_user", "a user, 100", "from wallet_entries where user_id = $1", [user, 100]),
    ("ledger::entries_of_event", "an event", "from wallet_entries where event_id = $2 and provider = $1",
     [credit_provider, credit_event]),
    ("payments::of_user", f"{heavy}, 100", "from payments where user_id = $1", [heavy, 100]),
    ("payments::of_event", "a charge.succeeded", "from payments where provider = $1 and event_id = $2",
     [charge_provider, charge_event]),
    ("subscriptions::rows", f"user {heavy}", "where provider = $2 and event_id = $3", [heavy, None, None]),
    ("subscriptions::rows", "an event", "where provider = $2 and event_id = $3", [None, sub_provider, sub_event]),
    ("sweep store::runs", "", "from sweeps order by provider", []),
    ("story::timeline", "an event id", STORY, [credit_event]),
    ("story::timeline", heavy, STORY, [heavy]),
    ("story::timeline", "a user", STORY, [user]),
    ("story::timeline", "a Razorpay payment id", STORY, [rzp_payment]),
    ("story::timeline", "a refunded Stripe charge id", STORY, [refund_charge]),
    ("story::timeline", "a subscription id", STORY, [subscription]),
    ("story::timeline", "an unknown id", STORY, [unknown]),
]

RELATED = ["processed_events_pkey", "bitmap wallet_entries_source_ref", "bitmap wallet_entries_refunds_of",
           "bitmap wallet_entries_wallet", "bitmap payments_payment_id", "bitmap payments_payment_ref",
           "bitmap payments_user_id", "bitmap subscriptions_subscription_id", "bitmap subscriptions_user_id"]
BIG = {"processed_events", "wallet_entries", "wallets", "payments", "outbox", "subscriptions"}

def walk(node, found):
    kind = node["Node Type"]
    if "Index Name" in node:
        found.append(("bitmap " if kind.startswith("Bitmap") else "") + node["Index Name"]
                     + (" (only)" if kind == "Index Only Scan" else ""))
    elif kind == "Seq Scan":
        found.append(("SEQ " if node["Relation Name"] in BIG else "seq ") + node["Relation Name"])
    elif kind == "Function Scan":
        found.append("function " + node.get("Function Name", "?"))
    for child in node.get("Plans", []):
        walk(child, found)

def explained(sql, types, args, mode, settings=()):
    """The EXPLAINs of `reps` runs in plan_cache_mode `mode` (then
    `settings`), or None when one ran past the timeout."""
    params = f"({', '.join(types)})" if types else ""
    execute = f"execute console_q({', '.join(lit(a) for a in args)})" if args else "execute console_q"
    script = ["begin;", f"prepare console_q{params} as {sql};", f"set local plan_cache_mode = {mode};",
              *settings, f"set local statement_timeout = '{timeout}s';"]
    for _ in range(reps):
        script += ["savepoint s;", f"explain (analyze, buffers, format json) {execute};",
                   "rollback to savepoint s;"]
    script.append("rollback;")
    done = subprocess.run([psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url],
                          input="\n".join(script) + "\n", capture_output=True, text=True)
    if done.returncode:
        if "statement timeout" in done.stderr:
            return None
        sys.exit(f"console-queries: psql failed:\n{done.stderr}")
    out, docs, at = done.stdout, [], 0
    decoder = json.JSONDecoder()
    while True:
        while at < len(out) and out[at].isspace():
            at += 1
        if at >= len(out):
            break
        doc, at = decoder.raw_decode(out, at)
        docs.append(doc[0])
    return docs

def summary(docs):
    if docs is None:
        return {"ms": timeout * 1000.0, "timeout": True, "planning": 0, "rows": None, "buffers": "-",
                "used": "(timed out)", "jit": 0}
    best = min(docs, key=lambda d: d["Execution Time"])
    plan = best["Plan"]
    used = []
    walk(plan, used)
    seen = []
    for u in used:
        if u not in seen:
            seen.append(u)
    # related_events' arms, each by its own index, said once.
    if all(arm in seen for arm in RELATED):
        seen = ["related_events (each arm by its index)"] + [u for u in seen if u not in RELATED]
    last = docs[-1]["Plan"]
    return {
        "ms": best["Execution Time"],
        "planning": min(d["Planning Time"] for d in docs),
        "rows": plan["Actual Rows"],
        "buffers": f"{last.get('Shared Hit Blocks', 0):,} / {last.get('Shared Read Blocks', 0):,}",
        "used": ", ".join(seen) or "-",
        "jit": sum(d.get("JIT", {}).get("Timing", {}).get("Total", 0) for d in docs) / len(docs),
        "timeout": False,
    }

results = []
for name, case, marker, args in cases:
    sql, types = statement(marker)
    if len(types) != len(args):
        sys.exit(f"console-queries: {name} takes {len(types)} parameters, {len(args)} given")
    skip = lookup(marker)
    custom = explained(sql, types, args, "force_custom_plan", LOOKUP if skip else ())
    generic = None if skip else summary(explained(sql, types, args, "force_generic_plan"))
    results.append((name, case, summary(custom), generic))

def ms(x):
    return f"{x:.2f}" if x < 10 else f"{x:,.0f}"

print(f"| query | case | rows | custom plan, ms | generic plan, ms | buffers hit / read | index used (custom plan) | generic plan, if other |")
print("|---|---|---|---|---|---|---|---|")
slow = []
for name, case, c, g in results:
    if g is None:
        g = {**c, "custom_only": True}
    other = "" if g.get("custom_only") or g["used"] == c["used"] else g["used"]
    def flag(s):
        if s.get("custom_only"):
            return "(custom only)"
        if s["timeout"]:
            return f"**> {timeout:,} s**"
        return (f"**{ms(s['ms'])}**" if s["ms"] > 50 else ms(s["ms"])) + (f" (JIT {s['jit']:.0f})" if s["jit"] else "")
    found = "-" if c["rows"] is None else f"{c['rows']:,}"
    print(f"| `{name}` | {case} | {found} | {flag(c)} | {flag(g)} | {c['buffers']} | {c['used']} | {other} |")
    if max(c["ms"], g["ms"]) > 50 or "SEQ " in c["used"] + other:
        slow.append(f"{name} ({case})")
print()
print(f"Best of {reps} runs each, execution time (custom plans plan each time: "
      f"{max(r[2]['planning'] for r in results):.1f} ms at most; \"custom only\": the statement runs "
      "in a transaction begun with db::BEGIN_LOOKUP, so never as a generic plan, and without JIT). "
      f"Over 50 ms or a sequential scan of a large table: {'; '.join(slow) if slow else 'none'}.")
PY
