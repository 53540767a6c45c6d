//! Credits, many to a statement, whichever provider's: the payment rows
//! that captures record before their credit, then one ledger entry per
//! credit (natural key, balance in the same statement), each announced as
//! `wallet.credited`. A credit that events were deferred for says so
//! ([`Applied::releases`]); the engine applies them. And payment rows that
//! only record a status.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::effect::{Applied, Effect, Error, PlainCredit};
use super::teach::{Lesson, teach_each};
use super::{Decoded, waits};
use crate::ledger::{self, EntryKind, NewEntry};
use crate::owners::{self, Subject};
use crate::payments::{self, Payment, Recorded};
use crate::providers::Event;
use crate::{events, outbox};

/// Applies a run of credits ([`Effect::Credit`]) in order, the credits
/// sharing their statements: first the payment rows of those that record
/// one (a payment stored with another amount or currency rejects its
/// event), then the credits. Payment rows and credits touch different
/// tables, so the result is that of one event at a time. Answers a prefix
/// of `run` (never empty when `run` is not): it stops before a credit of a
/// wallet or payment whose credit earlier in the run releases deferred
/// events ([`Applied::releases`]), which apply first. Call with their plans' locks held.
pub async fn apply_credits(
    conn: &mut PgConnection,
    run: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let mut applied: Vec<Option<Applied>> = Vec::with_capacity(run.len());
    let mut owed: Vec<(&Event, &PlainCredit)> = Vec::with_capacity(run.len());
    let mut captures: Vec<(usize, Payment<'_>)> = Vec::new();
    for (i, unit) in run.iter().enumerate() {
        let Effect::Credit { credit, payment } = unit.effect() else {
            return Err(Error::Invariant(
                "a run of credits holds an event without a credit",
            ));
        };
        applied.push(None);
        owed.push((unit.event(), credit));
        if let Some(payment) = payment {
            captures.push((i, payment.row(unit.event().provider())));
        }
    }
    let rows: Vec<(&Payment<'_>, Option<&str>)> = captures
        .iter()
        .map(|(i, row)| (row, Some(run[*i].event().event_id())))
        .collect();
    for ((i, _), recorded) in captures
        .iter()
        .zip(payments::upsert_many(conn, &rows).await?)
    {
        if recorded == Recorded::Differs {
            applied[*i] = Some(Applied::rejected(payments::DIFFERS));
        }
    }
    let crediting: Vec<(usize, (&Event, &PlainCredit))> = owed
        .into_iter()
        .enumerate()
        .filter(|(i, _)| applied[*i].is_none())
        .collect();
    let credits: Vec<(&Event, &PlainCredit)> = crediting.iter().map(|(_, c)| *c).collect();
    let credited = credit_all(conn, &credits).await?;
    // The credits stopped before what a credit releases wait for the next
    // run, and so do the events after them.
    let end = match crediting.get(credited.len()) {
        Some((next, _)) => *next,
        None => run.len(),
    };
    for ((i, _), credited) in crediting.iter().zip(credited) {
        applied[*i] = Some(credited);
    }
    applied.truncate(end);
    applied
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or(Error::Invariant("a credit in the run has no outcome"))
}

/// Upserts the payment rows that only record a status (a failed, pending
/// or declined payment: [`Effect::Status`]), in order, in one statement
/// when no two are one payment. A status never moves back, so it never
/// undoes a capture. Call with their plans' locks held.
pub(super) async fn record_statuses(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let rows = units
        .iter()
        .map(|unit| match unit.effect() {
            Effect::Status(payment) => Ok(payment.row(unit.event().provider())),
            _ => Err(Error::Invariant("a set of statuses holds another event")),
        })
        .collect::<Result<Vec<Payment<'_>>, Error>>()?;
    let upserts: Vec<(&Payment<'_>, Option<&str>)> = rows.iter().map(|row| (row, None)).collect();
    let recorded = payments::upsert_many(conn, &upserts).await?;
    Ok(rows
        .iter()
        .zip(recorded)
        .map(|(row, recorded)| match recorded {
            Recorded::Recorded { .. } => {
                Applied::processed(json!({ "payment_id": row.payment_id }))
            }
            Recorded::Differs => Applied::rejected(payments::DIFFERS),
        })
        .collect())
}

/// Applies credits in order, in a handful of statements whatever their
/// number: the entries and wallets in one, the `wallet.credited` rows (each
/// with the balance right after its entry) in one. Of two events crediting
/// one payment, the first in `credits` (or before) owns the credit; the
/// other is `ignored` with the owner. The events deferred for a credit
/// ([`Applied::releases`]) apply after the answers, before any later credit
/// of its wallet or payment is posted ([`released_before`]), exactly as one
/// credit per transaction would leave them: the answers are for a prefix
/// of `credits`, never empty when `credits` is not. Call with the credits' and wallets' locks
/// held (the engine takes them), so that every credit and deferred refund
/// committed before is seen.
pub(super) async fn credit_all(
    conn: &mut PgConnection,
    credits: &[(&Event, &PlainCredit)],
) -> Result<Vec<Applied>, Error> {
    let entries: Vec<NewEntry<'_>> = credits
        .iter()
        .map(|(event, credit)| NewEntry {
            user_id: &credit.user_id,
            currency: &credit.currency,
            amount_minor: credit.amount_minor,
            kind: EntryKind::Credit,
            provider: event.provider(),
            source_ref: &credit.source_ref,
            event_id: event.event_id(),
            parent_ref: None,
        })
        .collect();
    let waiting = waiting_for(conn, &entries).await?;
    let mut end = released_before(&entries, &waiting);
    // The customers the credits name teach their owner; one learned anew
    // that events wait for releases them, so it ends the run too.
    let customers: Vec<(&str, Vec<String>)> = credits[..end]
        .iter()
        .map(|(event, credit)| {
            let customer = credit.customer.as_deref();
            let wait = customer.map(|customer| owners::wait_key(Subject::Customer, customer));
            (event.provider(), wait.into_iter().collect())
        })
        .collect();
    end = waits::released_after(conn, &customers).await?;
    let lessons: Vec<(usize, Lesson<'_>)> = credits[..end]
        .iter()
        .enumerate()
        .filter_map(|(i, (event, credit))| {
            let customer = credit.customer.as_deref()?;
            Some((
                i,
                Lesson {
                    event,
                    subject: Subject::Customer,
                    id: customer,
                    user_id: &credit.user_id,
                },
            ))
        })
        .collect();
    let taught = teach_each(conn, end, &lessons).await?;
    let posted = post_credits(conn, &entries[..end], &credits[..end], &waiting).await?;
    Ok(posted
        .into_iter()
        .zip(taught)
        .map(|(applied, learned)| learned.onto(applied))
        .collect())
}

/// How many of `entries` post before the events `waiting` for some of them
/// apply: up to the first entry of a wallet or a payment that one waited
/// for before it credits. What waits for a credit (its refunds) touches
/// only that payment and its wallet, so it may apply after the credits of
/// other wallets and payments, as it would right after its credit.
fn released_before(entries: &[NewEntry<'_>], waiting: &HashSet<(&str, &str)>) -> usize {
    let mut released: Vec<&NewEntry<'_>> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let touches = |r: &&NewEntry<'_>| {
            (r.user_id == entry.user_id && r.currency == entry.currency)
                || (r.provider == entry.provider && r.source_ref == entry.source_ref)
        };
        if released.iter().any(touches) {
            return i;
        }
        if waiting.contains(&(entry.provider, entry.source_ref)) {
            released.push(entry);
        }
    }
    entries.len()
}

/// Posts and announces `entries`; the last may release what waits for it.
async fn post_credits(
    conn: &mut PgConnection,
    entries: &[NewEntry<'_>],
    credits: &[(&Event, &PlainCredit)],
    waiting: &HashSet<(&str, &str)>,
) -> Result<Vec<Applied>, Error> {
    let events: Vec<&Event> = credits.iter().map(|(event, _)| *event).collect();
    let contexts: Vec<Value> = credits.iter().map(|(_, c)| c.context.clone()).collect();
    let posted = post_announced(conn, entries, "wallet.credited", &events, contexts).await?;
    let entries_posted: Vec<Option<ledger::Posted>> =
        posted.iter().map(|p| p.map(|(p, _)| p)).collect();
    let owners = owners_of_unposted(conn, entries, &entries_posted).await?;
    let mut applied = Vec::with_capacity(entries.len());
    for (entry, posted) in entries.iter().zip(posted) {
        let Some((posted, outbox_id)) = posted else {
            let owner = owners
                .get(&(entry.provider, entry.source_ref))
                .ok_or(Error::Invariant(
                    "an entry that was not posted has no owner",
                ))?;
            applied.push(Applied::owned_by(
                "this payment was already credited",
                owner,
            ));
            continue;
        };
        let mut credited = Applied::processed(json!({
            "entry_id": posted.entry_id,
            "balance_minor": posted.balance_minor,
            "outbox_id": outbox_id,
            "applied_deferred": [],
        }));
        if waiting.contains(&(entry.provider, entry.source_ref)) {
            credited.releases.push(entry.source_ref.to_owned());
        }
        applied.push(credited);
    }
    Ok(applied)
}

/// The events that own the natural keys of the entries that did not post.
async fn owners_of_unposted<'a>(
    conn: &mut PgConnection,
    entries: &[NewEntry<'a>],
    posted: &[Option<ledger::Posted>],
) -> Result<HashMap<(&'a str, &'a str), String>, Error> {
    let mut owners = HashMap::new();
    for (provider, kind, refs) in unposted_by_provider(entries, posted) {
        for (source_ref, owner) in ledger::owners(conn, provider, kind, &refs).await? {
            if let Some(key) = refs.iter().find(|r| **r == source_ref) {
                owners.insert((provider, *key), owner);
            }
        }
    }
    Ok(owners)
}

/// The unposted entries' keys, grouped by provider and kind.
fn unposted_by_provider<'a>(
    entries: &[NewEntry<'a>],
    posted: &[Option<ledger::Posted>],
) -> Vec<(&'a str, EntryKind, Vec<&'a str>)> {
    let mut groups: Vec<(&str, EntryKind, Vec<&str>)> = Vec::new();
    for (entry, _) in entries.iter().zip(posted).filter(|(_, p)| p.is_none()) {
        match groups
            .iter_mut()
            .find(|(p, k, _)| *p == entry.provider && *k == entry.kind)
        {
            Some((_, _, refs)) => refs.push(entry.source_ref),
            None => groups.push((entry.provider, entry.kind, vec![entry.source_ref])),
        }
    }
    groups
}

/// Which of the credits' payments have events waiting for them
/// (`(provider, key)`), in one statement.
async fn waiting_for<'a>(
    conn: &mut PgConnection,
    entries: &[NewEntry<'a>],
) -> Result<HashSet<(&'a str, &'a str)>, Error> {
    let keys: Vec<(&str, &str)> = entries.iter().map(|e| (e.provider, e.source_ref)).collect();
    let found = events::waiting_any(conn, &keys).await?;
    Ok(entries
        .iter()
        .map(|e| (e.provider, e.source_ref))
        .filter(|(provider, key)| found.contains(&((*provider).to_owned(), (*key).to_owned())))
        .collect())
}

/// The `wallet.*` payload of a posted entry: `{user_id, currency,
/// amount_minor (positive), balance_minor, entry_id}` plus `context`.
pub(super) fn announcement(entry: &NewEntry<'_>, posted: ledger::Posted, context: Value) -> Value {
    let mut payload = json!({
        "user_id": entry.user_id,
        "currency": entry.currency,
        "amount_minor": entry.amount_minor.abs(),
        "balance_minor": posted.balance_minor,
        "entry_id": posted.entry_id,
    });
    if let (Value::Object(fields), Value::Object(extra)) = (&mut payload, context) {
        fields.extend(extra);
    }
    payload
}

/// Posts `entries` in order (those of `events`) and writes a `topic`
/// outbox row for each that posted ([`announcement`], with its `contexts`
/// entry), in two statements whatever their number: for each entry, the
/// posted entry and its outbox id.
pub(super) async fn post_announced(
    conn: &mut PgConnection,
    entries: &[NewEntry<'_>],
    topic: &str,
    events: &[&Event],
    contexts: Vec<Value>,
) -> Result<Vec<Option<(ledger::Posted, Option<i64>)>>, Error> {
    let posted = ledger::post(conn, entries).await?;
    let payloads: Vec<Option<Value>> = entries
        .iter()
        .zip(&posted)
        .zip(contexts)
        .map(|((entry, posted), context)| posted.map(|posted| announcement(entry, posted, context)))
        .collect();
    let wallets: Vec<String> = entries
        .iter()
        .map(|e| ledger::wallet_key(e.user_id, e.currency))
        .collect();
    let messages: Vec<outbox::Message<'_>> = entries
        .iter()
        .zip(&payloads)
        .zip(&wallets)
        .zip(events)
        .filter_map(|(((entry, payload), wallet), event)| {
            Some(outbox::Message {
                topic,
                provider: entry.provider,
                event_id: entry.event_id,
                event_type: Some(event.event_type()),
                payload: payload.as_ref()?,
                ordering_key: Some(wallet),
                account: event.account(),
            })
        })
        .collect();
    let mut outbox_ids = match messages.is_empty() {
        true => Vec::new(),
        false => outbox::enqueue(conn, &messages).await?,
    }
    .into_iter();
    Ok(posted
        .into_iter()
        .map(|posted| Some((posted?, outbox_ids.next().flatten())))
        .collect())
}

/// A posted entry and its announcement.
pub(super) struct Announced {
    pub entry_id: i64,
    pub balance_minor: i64,
    pub outbox_id: Option<i64>,
}

/// Posts `entry` and writes its `topic` outbox row ([`announcement`]).
/// `Err(owner event id)` when the entry's natural key was already taken.
pub(super) async fn post_and_announce(
    conn: &mut PgConnection,
    event: &Event,
    entry: &NewEntry<'_>,
    topic: &str,
    context: Value,
) -> Result<Result<Announced, String>, Error> {
    let entries = std::slice::from_ref(entry);
    let posted = post_announced(conn, entries, topic, &[event], vec![context]).await?;
    let Some((posted, outbox_id)) = posted.into_iter().next().flatten() else {
        let owner = ledger::owners(conn, entry.provider, entry.kind, &[entry.source_ref])
            .await?
            .remove(entry.source_ref)
            .ok_or(Error::Invariant(
                "an entry that was not posted has no owner",
            ))?;
        return Ok(Err(owner));
    };
    Ok(Ok(Announced {
        entry_id: posted.entry_id,
        balance_minor: posted.balance_minor,
        outbox_id,
    }))
}
