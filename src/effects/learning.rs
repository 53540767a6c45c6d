//! Payments whose owner is learned rather than written on them: a credit
//! finds its owner, or waits for it ([`credit_unowned_all`]); a payment that
//! pays an invoice is the invoice's ([`link_invoice`], [`pays_invoice`]).

use std::collections::HashSet;

use serde_json::json;
use sqlx::PgConnection;

use super::effect::{Applied, Effect, Error, Owed, PaymentRecord, PlainCredit};
use super::{Decoded, credits, waits};
use crate::owners::{self, Candidate, Subject};
use crate::payments::{self, Payment, Recorded};
use crate::providers::Event;
use crate::{events, invoices};

/// Applies a run of credits whose owner is learned ([`Effect::Unowned`]) in
/// order, sharing their statements: which pay an invoice (read in one
/// statement), their owners (resolved in one), the payment rows of those
/// that carry one, the credits (posted together,
/// [`credits::credit_all`]) and the waits of those with no owner yet (in
/// one). Each credits the first of its candidates that yields an owner; a
/// payment that pays an invoice is the invoice's; with no owner known yet
/// it waits for one (`deferred`). Answers a prefix of `units`, never empty
/// when `units` is not: no two of it share a key of their plans, and it
/// ends with the first credit that events wait for, which apply before the
/// next. Call with their plans' locks held (their owners' wallets among
/// them: the engine resolves them the same way).
pub(super) async fn credit_unowned_all(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let mut owing: Vec<Owing<'_>> = Vec::with_capacity(units.len());
    let mut keys: HashSet<&str> = HashSet::new();
    for unit in units {
        let Effect::Unowned {
            credit,
            candidates,
            payment,
        } = unit.effect()
        else {
            return Err(Error::Invariant(
                "a set of learned credits holds another event",
            ));
        };
        let plan = &unit.plan().keys;
        if !owing.is_empty() && plan.iter().any(|key| keys.contains(key.as_str())) {
            break;
        }
        keys.extend(plan.iter().map(String::as_str));
        owing.push(Owing {
            event: unit.event(),
            owed: credit,
            candidates,
            payment: payment.as_ref(),
        });
    }
    let payments: Vec<(&str, &str)> = owing
        .iter()
        .map(|o| (o.event.provider(), o.owed.source_ref.as_str()))
        .collect();
    let invoices = invoices::paid_by_many(conn, &payments).await?;
    let lists: Vec<(&str, &[Candidate])> = owing
        .iter()
        .zip(&invoices)
        .map(|(o, invoice)| match invoice {
            Some(_) => (o.event.provider(), &[][..]),
            None => (o.event.provider(), o.candidates),
        })
        .collect();
    let mut owners = owners::resolve_many(conn, &lists).await?;
    // A payment with an owner is credited, which teaches its customer's.
    let releases: Vec<(&str, Vec<String>)> = owing
        .iter()
        .zip(&owners)
        .map(|(o, owner)| match owner {
            Some(_) => (o.event.provider(), released_keys(o.owed)),
            None => (o.event.provider(), Vec::new()),
        })
        .collect();
    let end = waits::released_after(conn, &releases).await?;
    owing.truncate(end);
    owners.truncate(end);

    let mut applied: Vec<Option<Applied>> = invoices[..end]
        .iter()
        .map(|invoice| invoice.as_deref().map(pays_invoice))
        .collect();
    // The payment rows of the captures to credit, with their owners.
    let captures: Vec<(usize, PaymentRecord)> = owing
        .iter()
        .zip(&owners)
        .enumerate()
        .filter(|(i, _)| applied[*i].is_none())
        .filter_map(|(i, (o, owner))| {
            let row = PaymentRecord {
                user_id: Some(owner.clone()?),
                ..o.payment?.clone()
            };
            Some((i, row))
        })
        .collect();
    let rows: Vec<(usize, (Payment<'_>, Option<&str>))> = captures
        .iter()
        .map(|(i, row)| {
            let event = owing[*i].event;
            (*i, (row.row(event.provider()), Some(event.event_id())))
        })
        .collect();
    let upserts: Vec<(&Payment<'_>, Option<&str>)> =
        rows.iter().map(|(_, (row, event))| (row, *event)).collect();
    for ((i, _), recorded) in rows
        .iter()
        .zip(payments::upsert_many(conn, &upserts).await?)
    {
        if recorded == Recorded::Differs {
            applied[*i] = Some(Applied::rejected(payments::DIFFERS));
        }
    }
    let crediting: Vec<(usize, PlainCredit)> = owing
        .iter()
        .zip(&owners)
        .enumerate()
        .filter(|(i, _)| applied[*i].is_none())
        .filter_map(|(i, (o, owner))| Some((i, o.owed.to(owner.clone()?))))
        .collect();
    let credits: Vec<(&Event, &PlainCredit)> = crediting
        .iter()
        .map(|(i, credit)| (owing[*i].event, credit))
        .collect();
    let credited = credits::credit_all(conn, &credits).await?;
    if credited.len() != credits.len() {
        return Err(Error::Invariant("a learned credit ended its run early"));
    }
    for ((i, _), credited) in crediting.iter().zip(credited) {
        applied[*i] = Some(credited);
    }
    let waits: Vec<(usize, String)> = (0..owing.len())
        .filter(|&i| applied[i].is_none())
        .map(|i| (i, wait_for(owing[i].candidates, &owing[i].owed.source_ref)))
        .collect();
    let deferrals: Vec<(&str, &str, &str)> = waits
        .iter()
        .map(|(i, key)| {
            (
                owing[*i].event.provider(),
                owing[*i].event.event_id(),
                key.as_str(),
            )
        })
        .collect();
    events::defer_many(conn, &deferrals).await?;
    for (i, key) in &waits {
        applied[*i] = Some(Applied::deferred(key));
    }
    applied
        .into_iter()
        .map(|applied| applied.ok_or(Error::Invariant("a learned credit has no outcome")))
        .collect()
}

/// One credit whose owner is learned, as [`Effect::Unowned`] holds it.
struct Owing<'a> {
    event: &'a Event,
    owed: &'a Owed,
    candidates: &'a [Candidate],
    payment: Option<&'a PaymentRecord>,
}

/// What crediting `owed` may release: its refunds, and the owner waits of
/// its customer (whose owner the credit teaches).
pub(super) fn released_keys(owed: &Owed) -> Vec<String> {
    [Some(owed.source_ref.clone())]
        .into_iter()
        .chain([owed
            .customer
            .as_deref()
            .map(|customer| owners::wait_key(Subject::Customer, customer))])
        .flatten()
        .collect()
}

/// What a payment without a known owner waits for: its customer's owner
/// when its rule reads one, else its own (a Checkout Session teaches both).
pub(super) fn wait_for(candidates: &[Candidate], payment: &str) -> String {
    let customer = candidates.iter().find_map(|c| match c {
        Candidate::Customer(id) => Some(id.as_str()),
        _ => None,
    });
    match customer {
        Some(customer) => owners::wait_key(Subject::Customer, customer),
        None => owners::wait_key(Subject::Payment, payment),
    }
}

/// A payment that pays `invoice`: recorded `ignored` with it.
pub(super) fn pays_invoice(invoice: &str) -> Applied {
    Applied::ignored_with(json!({
        "reason": "the payment pays an invoice: the invoice's effects apply, not a wallet top-up",
        "invoice_id": invoice,
    }))
}

/// `invoice_payment.paid` (or an `invoice.paid` that names its payment
/// intent): payment `payment` is invoice `invoice`'s, which releases it if
/// it waits for an owner, and its refunds waiting for a credit that will
/// never come. Call with the payment's credit key held.
pub(super) async fn link_invoice(
    conn: &mut PgConnection,
    event: &Event,
    payment: &str,
    invoice: &str,
) -> Result<Vec<String>, Error> {
    let new =
        invoices::link_payment(conn, event.provider(), payment, invoice, event.event_id()).await?;
    Ok(match new {
        true => vec![
            owners::wait_key(Subject::Payment, payment),
            payment.to_owned(),
        ],
        false => Vec::new(),
    })
}
