//! Read-only accounts that cross tables: the story of one thing (an event,
//! a payment or refund, a user, a subscription), as `webhookd explain`
//! prints it and the console shows it. The events a subject names are found
//! by `related_events` (a SQL function in the migrations), the one place
//! that says what "related" means.

use sqlx::PgPool;

use crate::db::{self, Timestamp};

/// `subject`'s story as `(at, line)`, oldest first, in one statement: the
/// events it is related to (as an event, payment, user or subscription id),
/// what they wrote, and the payment, subscription and wallet rows it names.
/// Every table is reached by an index from the related events or the
/// subject: an `or` between the subject and the related events is written
/// as a `union` of the two lookups (an `or` with a subquery read the whole
/// table), and the outbox's rows are found under each topic by their dedupe
/// key, `{provider}:{event_id}` (the topics read off the key's index one
/// step each; the outbox has no index by event). Planned for the subject,
/// without JIT ([`db::BEGIN_LOOKUP`]): estimated at many related events,
/// its plan was JIT-compiled for longer than it ran.
pub async fn timeline(pool: &PgPool, subject: &str) -> Result<Vec<(String, String)>, sqlx::Error> {
    let rows = db::lookup(pool).all(sqlx::query!(
        r#"
        with recursive related as (select distinct provider, event_id from related_events($1)),
        topics (topic) as (
            select min(topic) from outbox
            union all
            select (select min(o.topic) from outbox o where o.topic > t.topic)
            from topics t where t.topic is not null
        ),
        written as (
            select o.* from related r
            cross join topics t
            -- one lookup by key for each event and topic (offset 0 keeps it one:
            -- joined freely, the planner hashed the whole outbox instead)
            cross join lateral (select * from outbox o
                                where o.topic = t.topic and o.dedupe_key = r.provider || ':' || r.event_id
                                  and o.provider = r.provider and o.event_id = r.event_id
                                offset 0) o
        ),
        timeline (at, line) as (
            select e.received_at,
                   format('event %s %s (%s) %s, claimed: %s %s',
                          e.provider, e.event_id, e.event_type,
                          case e.received_via
                              when 'sweep' then 'found by a sweep of the provider''s API'
                              when 'import' then 'imported (applied before webhookd)'
                              else 'received' || coalesce(' at /webhooks/' || e.source, '')
                                   || ', signature verified' end,
                          e.outcome, e.detail)
            from processed_events e join related using (provider, event_id)
            union all
            select w.created_at,
                   format('ledger entry #%s: %s %s %s for wallet %s/%s (natural key %s) by event %s',
                          w.id, w.kind, w.amount_minor, w.currency, w.user_id, w.currency, w.source_ref, w.event_id)
            from wallet_entries w join related using (provider, event_id)
            union all
            select o.created_at,
                   format('outbox #%s %s written by event %s', o.id, o.topic, o.event_id)
            from written o
            union all
            select a.at,
                   format('outbox #%s attempt %s failed%s: %s', a.outbox_id, a.attempt,
                          case a.outcome when 'dead' then ', no attempts left' else ', retried later' end,
                          a.error)
            from written o join outbox_attempts a on a.outbox_id = o.id
            union all
            select coalesce(o.delivered_at, o.dead_at, o.available_at),
                   case when o.delivered_at is not null
                            then format('outbox #%s delivered (webhook-id %s) after %s attempt(s)', o.id, o.id, o.attempts)
                        when o.dead_at is not null
                            then format('outbox #%s DEAD after %s attempt(s): %s', o.id, o.attempts, o.last_error)
                        else format('outbox #%s pending: %s attempt(s) so far, next at this time%s', o.id, o.attempts,
                                    coalesce(', last error: ' || o.last_error, ''))
                   end
            from written o
            union all
            select p.updated_at,
                   format('payment %s %s: %s, %s %s, refunded %s, user %s', p.provider, p.payment_id, p.status,
                          p.amount_minor, p.currency, p.refunded_minor, coalesce(p.user_id, '-'))
            from (select * from payments where payment_id = $1 or payment_ref = $1 or user_id = $1
                  union
                  select p.* from payments p join related using (provider, event_id)) p
            union all
            select s.updated_at,
                   format('subscription %s %s: %s (plan %s) as of event %s', s.provider, s.subscription_id,
                          s.status, coalesce(s.plan_id, '-'), s.event_id)
            from subscriptions s
            where s.subscription_id = $1 or s.user_id = $1
            union all
            select d.created_at, format('event %s %s deferred: waits for %s', d.provider, d.event_id, d.waits_for)
            from deferred_events d join related using (provider, event_id)
            union all
            select w.updated_at, format('wallet %s/%s balance %s', w.user_id, w.currency, w.balance_minor)
            from (select * from wallets where user_id = $1
                  union
                  select w.* from wallets w
                  join (select e.user_id, e.currency from wallet_entries e join related using (provider, event_id)) e
                    using (user_id, currency)) w
        )
        select at as "at!: Timestamp", line as "line!"
        from timeline
        order by at, line
        "#,
        subject,
    )).await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.at.millis(), row.line))
        .collect())
}
