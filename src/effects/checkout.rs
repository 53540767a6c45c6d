//! Stripe Checkout Sessions (and Payment Links, which make them): a session
//! teaches its owner for its payment intent and its customer; a paid
//! `payment` session credits that owner, under the intent's natural key,
//! so that the session and `payment_intent.succeeded` credit once between
//! them; any other session is announced (`checkout.completed`,
//! `checkout.failed`). Many sessions to a statement ([`apply_all`]).

use std::collections::HashSet;

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::effect::{Applied, CheckoutSession, Effect, Error, PlainCredit};
use super::teach::{Lesson, Taught, teach_each};
use super::{Decoded, credits, waits};
use crate::outbox;
use crate::owners::{self, Candidate, Subject};
use crate::providers::Event;

/// Applies a run of Checkout Session events ([`Effect::Checkout`]) in
/// order, sharing their statements: their owners resolved in one, taught
/// in one, their credits posted together ([`credits::credit_all`]), their
/// announcements written in one. Answers a prefix of `units`, never empty
/// when `units` is not: no two sessions of it share a key of their plans
/// (a payment intent, a customer, a learned owner), so none reads or
/// writes what another does; and it ends with the first session whose
/// owners or credit events wait for, which apply before the next. Call
/// with their plans' locks held.
pub(super) async fn apply_all(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let mut sessions: Vec<(&Event, &CheckoutSession)> = Vec::with_capacity(units.len());
    let mut keys: HashSet<&str> = HashSet::new();
    for unit in units {
        let Effect::Checkout(session) = unit.effect() else {
            return Err(Error::Invariant("a set of sessions holds another event"));
        };
        let plan = &unit.plan().keys;
        if !sessions.is_empty() && plan.iter().any(|key| keys.contains(key.as_str())) {
            break;
        }
        keys.extend(plan.iter().map(String::as_str));
        sessions.push((unit.event(), session));
    }
    let lists: Vec<(&str, &[Candidate])> = sessions
        .iter()
        .map(|(event, session)| (event.provider(), session.owner.as_slice()))
        .collect();
    let mut owners = owners::resolve_many(conn, &lists).await?;
    // A session with an owner teaches it, and credits it when paid.
    let releases: Vec<(&str, Vec<String>)> = sessions
        .iter()
        .zip(&owners)
        .map(|((event, session), owner)| match owner {
            Some(_) => (event.provider(), released_keys(session)),
            None => (event.provider(), Vec::new()),
        })
        .collect();
    let end = waits::released_after(conn, &releases).await?;
    sessions.truncate(end);
    owners.truncate(end);

    let mut taught = teach_owners(conn, &sessions, &owners).await?;
    let crediting: Vec<(usize, PlainCredit)> = sessions
        .iter()
        .zip(&owners)
        .enumerate()
        .filter_map(|(i, ((_, session), owner))| {
            Some((i, session.credit.as_ref()?.to(owner.clone()?)))
        })
        .collect();
    let credits: Vec<(&Event, &PlainCredit)> = crediting
        .iter()
        .map(|(i, credit)| (sessions[*i].0, credit))
        .collect();
    let credited = credits::credit_all(conn, &credits).await?;
    if credited.len() != credits.len() {
        return Err(Error::Invariant("a session's credit ended its run early"));
    }
    let mut applied: Vec<Option<Applied>> = sessions.iter().map(|_| None).collect();
    for ((i, _), credited) in crediting.iter().zip(credited) {
        applied[*i] = Some(credited);
    }
    let announcing: Vec<usize> = (0..sessions.len())
        .filter(|&i| applied[i].is_none())
        .collect();
    let announced = announce(conn, &sessions, &owners, &announcing).await?;
    for (i, announced) in announcing.into_iter().zip(announced) {
        applied[i] = Some(announced);
    }
    applied
        .into_iter()
        .zip(taught.drain(..))
        .map(|(applied, taught)| {
            applied
                .map(|applied| taught.onto(applied))
                .ok_or(Error::Invariant("a session has no outcome"))
        })
        .collect()
}

/// What a session with an owner may release: the owner waits of its
/// payment intent and its customer, and its credit's refunds.
fn released_keys(session: &CheckoutSession) -> Vec<String> {
    let intent = session.payment_intent.as_deref();
    intent
        .map(|intent| owners::wait_key(Subject::Payment, intent))
        .into_iter()
        .chain(
            session
                .customer
                .as_deref()
                .map(|c| owners::wait_key(Subject::Customer, c)),
        )
        .chain(
            intent
                .filter(|_| session.credit.is_some())
                .map(str::to_owned),
        )
        .collect()
}

/// Teaches each session's owner, when it has one, for its payment intent
/// and its customer, in one statement: what each session taught.
async fn teach_owners(
    conn: &mut PgConnection,
    sessions: &[(&Event, &CheckoutSession)],
    owners: &[Option<String>],
) -> Result<Vec<Taught>, Error> {
    let mut lessons: Vec<(usize, Lesson<'_>)> = Vec::new();
    for (i, ((event, session), owner)) in sessions.iter().zip(owners).enumerate() {
        let Some(user_id) = owner else { continue };
        let subjects = [
            (Subject::Payment, session.payment_intent.as_deref()),
            (Subject::Customer, session.customer.as_deref()),
        ];
        for (subject, id) in subjects {
            if let Some(id) = id {
                lessons.push((
                    i,
                    Lesson {
                        event,
                        subject,
                        id,
                        user_id,
                    },
                ));
            }
        }
    }
    teach_each(conn, sessions.len(), &lessons).await
}

/// `checkout.completed` or `checkout.failed` of each session at
/// `indexes`, with its owner, in one statement.
async fn announce(
    conn: &mut PgConnection,
    sessions: &[(&Event, &CheckoutSession)],
    owners: &[Option<String>],
    indexes: &[usize],
) -> Result<Vec<Applied>, Error> {
    if indexes.is_empty() {
        return Ok(Vec::new());
    }
    let payloads: Vec<Value> = indexes
        .iter()
        .map(|&i| {
            let (_, session) = sessions[i];
            json!({
                "checkout_session": session.id,
                "mode": session.mode,
                "payment_status": session.payment_status,
                "payment_intent": session.payment_intent,
                "customer_id": session.customer,
                "subscription_id": session.subscription,
                "user_id": owners[i],
                "amount_total": session.amount_total,
                "currency": session.currency,
            })
        })
        .collect();
    let messages: Vec<outbox::Message<'_>> = indexes
        .iter()
        .zip(&payloads)
        .map(|(&i, payload)| {
            let (event, session) = sessions[i];
            outbox::Message {
                topic: session.announces,
                provider: event.provider(),
                event_id: event.event_id(),
                event_type: Some(event.event_type()),
                payload,
                ordering_key: None,
                account: event.account(),
            }
        })
        .collect();
    let outbox_ids = outbox::enqueue(conn, &messages).await?;
    Ok(indexes
        .iter()
        .zip(outbox_ids)
        .map(|(&i, outbox_id)| {
            let applied = Applied::processed(json!({ "outbox_id": outbox_id }));
            match (&owners[i], &sessions[i].1.credit) {
                (None, Some(_)) => applied.noting(
                    "reason",
                    "paid, but no owner is known: the payment intent's own event waits for one"
                        .into(),
                ),
                _ => applied,
            }
        })
        .collect())
}
