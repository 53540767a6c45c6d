//! Read-only accounts that cross tables: the story of one thing (an event,
//! a payment or refund, a user, a subscription), as `webhookd explain`
//! prints it and the console shows it. The events a subject names are found
//! by `related_events` (a SQL function in the migrations), the one place
//! that says what "related" means.

use sqlx::PgPool;

use crate::db::{self, Timestamp};

/// `subject`'s story as `(at, line)`, oldest first, in one statement: the
/// events it is related to (as an event, payment, user or subscription id),
/// what they wrote, and the payment, subscription, owner and wallet rows it
/// names. A user's owners (the customers and payments learned as theirs,
/// each with the event that taught it and the conflicting claims counted)
/// bring the events that taught them: a Checkout Session is in its
/// client_reference_id's story even when it credited nothing.
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
            select o.* from topics t
            -- for each topic, one index scan for every related event's key
            -- (offset 0 keeps it one: joined freely, the planner hashed the
            -- whole outbox instead)
            cross join lateral (select * from outbox o
                                where o.topic = t.topic
                                  and o.dedupe_key = any (array(select r.provider || ':' || r.event_id
                                                                from related r))
                                offset 0) o
            where exists (select from related r where r.provider = o.provider and r.event_id = o.event_id)
        ),
        timeline (at, line) as (
            select e.received_at,
                   format('event %s %s (%s%s%s) %s, claimed: %s %s',
                          e.provider, e.event_id, e.event_type,
                          coalesce(', connected account ' || e.account, ''),
                          coalesce(', API version ' || e.api_version, ''),
                          case e.received_via
                              when 'sweep' then 'found by a sweep of the provider''s API'
                              when 'import' then 'imported (applied before webhookd)'
                              else 'received' || coalesce(' at /webhooks/' || e.source, '')
                                   || ', signature verified' end,
                          e.outcome, e.detail)
                   || coalesce(format(' (personal data erased at %s)', e.erased_at), '')
                   || coalesce(format(' (payload expired at %s)', e.payload_expired_at), '')
            from processed_events e join related using (provider, event_id)
            union all
            select w.created_at,
                   format('ledger entry #%s: %s %s %s for wallet %s/%s (natural key %s) by event %s',
                          w.id, w.kind, w.amount_minor, w.currency, w.user_id, w.currency, w.source_ref, w.event_id)
            from wallet_entries w join related using (provider, event_id)
            union all
            select o.created_at,
                   format('outbox #%s %s written by event %s, for sink %s', o.id, o.topic, o.event_id, o.sink)
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
            select d.created_at,
                   case when starts_with(d.waits_for, 'owner:')
                            then format('event %s %s deferred: waits for the owner of %s %s', d.provider, d.event_id,
                                        split_part(d.waits_for, ':', 2),
                                        substr(d.waits_for, length(split_part(d.waits_for, ':', 2)) + 8))
                        else format('event %s %s deferred: waits for %s', d.provider, d.event_id, d.waits_for)
                   end
            from deferred_events d join related using (provider, event_id)
            union all
            select o.learned_at,
                   format('owner of %s %s %s learned: user %s, by event %s%s', o.provider, o.subject, o.subject_id,
                          o.user_id, o.event_id,
                          case when o.conflicts > 0
                               then format(' (CONFLICT: claimed for another user %s time(s) since; the first owner stays)', o.conflicts)
                               else '' end)
            from owners o where o.user_id = $1
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

/// What waits, or waited in vain, for an owner that `user_id` may be:
/// payments that wait for their owner (`waits_for` `owner:payment:…`)
/// although their customer is learned as the user's (a source whose owner
/// rule does not read `customer` never credits a customer's owner), and
/// payments rejected `no owner` whose payment or customer is learned as
/// the user's (saying whether it was credited or replayed since, or how a
/// replay would apply it). As `(at, line)`, oldest first.
///
/// Only these can be found from the user: a payment that waits for the
/// owner of a subject learned as the user's does not exist (learning the
/// owner released it in the same transaction), and a waiting or rejected
/// payment names no user at all, only its customer. The waits are read
/// through `deferred_events_owner_waits`, the rejections through the
/// `payment.unowned` rows of the outbox (the outbox's topic index, then
/// each one's owners by their key; pruned with the outbox): all of them,
/// which are few, whoever the subject is. The customer of a waiting
/// payment is read where Stripe writes it, the only provider whose
/// payments name one. For `webhookd explain`, not the console.
pub async fn unowned(pool: &PgPool, user_id: &str) -> Result<Vec<(String, String)>, sqlx::Error> {
    let rows = db::lookup(pool).all(sqlx::query!(
        r#"
        -- each read first and alone (materialized), down its own index
        with waiting as materialized (
            select d.provider, d.event_id, e.event_type, d.waits_for, d.created_at,
                   e.payload #>> '{data,object,customer}' as customer_id
            from deferred_events d
            join processed_events e on e.provider = d.provider and e.event_id = d.event_id
            where starts_with(d.waits_for, 'owner:') and starts_with(d.waits_for, 'owner:payment:')
        ),
        rejected as materialized (
            select x.id, x.provider, x.event_id, x.created_at, e.event_type, e.outcome,
                   x.payload ->> 'payment_id' as payment_id, x.payload ->> 'customer_id' as customer_id,
                   x.payload ->> 'amount_minor' as amount_minor, x.payload ->> 'currency' as currency
            from outbox x
            join processed_events e on e.provider = x.provider and e.event_id = x.event_id
            where x.topic = 'payment.unowned'
        )
        select w.created_at as "at!: Timestamp",
               format('event %s %s (%s) waits for the owner of payment %s; its customer %s is user %s''s '
                      '(by event %s), but the owner rule does not read `customer`: unless the owner of %s is '
                      'learned, it is rejected as no owner after WEBHOOKD_OWNER_WAIT',
                      w.provider, w.event_id, w.event_type, substr(w.waits_for, 15), o.subject_id, o.user_id,
                      o.event_id, substr(w.waits_for, 15)) as "line!"
        from waiting w
        join owners o on o.provider = w.provider and o.subject = 'customer' and o.subject_id = w.customer_id
        where o.user_id = $1
        union all
        select r.created_at,
               format('event %s %s (%s) rejected: no owner came for payment %s (%s %s) in time; outbox #%s payment.unowned. '
                      'Its %s %s is user %s''s (by event %s)%s',
                      r.provider, r.event_id, r.event_type, r.payment_id, r.amount_minor, r.currency, r.id,
                      o.subject, o.subject_id, o.user_id, o.event_id,
                      case when r.outcome <> 'rejected' then format('; replayed since: %s', r.outcome)
                           when c.event_id is not null then format('; credited since by event %s', c.event_id)
                           when o.subject = 'payment' then format(': replay it (webhookd events replay %s %s)',
                                                                  r.provider, r.event_id)
                           else ': with `customer` in the source''s owner rule, a replay credits it'
                      end)
        from rejected r
        -- the user's claim on it by the owners' key, its payment's before its customer's
        cross join lateral (select * from owners o
                            where o.provider = r.provider
                              and (o.subject, o.subject_id) in (('payment', r.payment_id), ('customer', r.customer_id))
                              and o.user_id = $1
                            order by o.subject desc limit 1) o
        -- its credit, by the ledger's natural key (offset 0 keeps it one lookup
        -- a row: joined freely, the planner may read every credit instead)
        left join lateral (select c.event_id from wallet_entries c
                           where c.provider = r.provider and c.kind = 'credit' and c.source_ref = r.payment_id
                           offset 0) c
          on true
        order by 1, 2
        "#,
        user_id,
    )).await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.at.millis(), row.line))
        .collect())
}
