//! A Stripe charge's receipt: its payment row, and `payment.receipt` from
//! the first event that announces it; many charges to a statement.

use std::collections::HashMap;

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::effect::{Applied, Effect, Error, StripeCharge};
use super::{Decoded, announce_each};
use crate::ledger::{self, EntryKind};
use crate::payments::{self, Payment, Recorded};
use crate::providers::Event;

/// Records each charge ([`Effect::Receipt`]), in order, in a handful of
/// statements whatever their number; the first event that announces a
/// charge sends its receipt. The wallet credit belongs to
/// `payment_intent.succeeded`: when that came first, the event is recorded
/// `ignored` with the credit's owner (the payment row and its receipt are
/// still written). Call with their plans' locks held.
pub(super) async fn record_charges(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let charges = units
        .iter()
        .map(|unit| match unit.effect() {
            Effect::Receipt(charge) => Ok((unit.event(), charge)),
            _ => Err(Error::Invariant("a set of receipts holds another event")),
        })
        .collect::<Result<Vec<(&Event, &StripeCharge)>, Error>>()?;
    let rows: Vec<Payment<'_>> = charges
        .iter()
        .map(|(event, charge)| charge.payment.row(event.provider()))
        .collect();
    let upserts: Vec<(&Payment<'_>, Option<&str>)> = rows
        .iter()
        .zip(&charges)
        .map(|(row, (event, _))| (row, Some(event.event_id())))
        .collect();
    let recorded = payments::upsert_many(conn, &upserts).await?;
    // Each charge's outcome when it does not announce the receipt.
    let settled: Vec<Option<Applied>> = charges
        .iter()
        .zip(&recorded)
        .map(|((event, _), recorded)| match recorded {
            Recorded::Differs => Some(Applied::rejected(payments::DIFFERS)),
            Recorded::Recorded { receipt_owner } => receipt_owner
                .as_deref()
                .filter(|owner| *owner != event.event_id())
                .map(|owner| Applied::owned_by("this charge was already recorded", owner)),
        })
        .collect();
    let announcing: Vec<(&Event, &StripeCharge)> = charges
        .iter()
        .zip(&settled)
        .filter(|(_, settled)| settled.is_none())
        .map(|(charge, _)| *charge)
        .collect();
    let outbox_ids = announce(conn, &announcing).await?;
    let credited = credits_of(conn, &announcing).await?;
    let mut announced = announcing.iter().zip(outbox_ids);
    let mut applied = Vec::with_capacity(charges.len());
    for settled in settled {
        if let Some(settled) = settled {
            applied.push(settled);
            continue;
        }
        let Some(((event, charge), outbox_id)) = announced.next() else {
            return Err(Error::Invariant("a receipt has no announcement"));
        };
        let credit = charge
            .payment_intent()
            .and_then(|intent| credited.get(&(event.provider(), intent)));
        applied.push(match credit {
            Some(owner) => Applied::ignored_with(json!({
                "reason": "the payment intent was already credited",
                "owner_event_id": owner,
                "receipt_outbox_id": outbox_id,
            })),
            None => Applied::processed(json!({ "outbox_id": outbox_id })),
        });
    }
    Ok(applied)
}

/// Writes each charge's `payment.receipt` row, in order: their outbox ids.
async fn announce(
    conn: &mut PgConnection,
    charges: &[(&Event, &StripeCharge)],
) -> Result<Vec<Option<i64>>, Error> {
    let payloads: Vec<Value> = charges
        .iter()
        .map(|(_, charge)| {
            json!({
                "payment_id": charge.id(),
                "payment_intent": charge.payment_intent(),
                "user_id": charge.payment.user_id,
                "amount_minor": charge.payment.amount_minor,
                "currency": charge.payment.currency,
                "status": charge.payment.status,
            })
        })
        .collect();
    let keys: Vec<String> = charges
        .iter()
        .map(|(event, charge)| format!("{}:payment:{}", event.provider(), charge.id()))
        .collect();
    let events: Vec<&Event> = charges.iter().map(|(event, _)| *event).collect();
    announce_each(conn, "payment.receipt", &events, &payloads, &keys).await
}

/// The events that credited the charges' payment intents, by `(provider,
/// intent)`: one statement per provider.
async fn credits_of<'a>(
    conn: &mut PgConnection,
    charges: &[(&'a Event, &'a StripeCharge)],
) -> Result<HashMap<(&'a str, &'a str), String>, Error> {
    let mut by_provider: Vec<(&str, Vec<&str>)> = Vec::new();
    for (event, charge) in charges {
        let Some(intent) = charge.payment_intent() else {
            continue;
        };
        match by_provider.iter_mut().find(|(p, _)| *p == event.provider()) {
            Some((_, intents)) => intents.push(intent),
            None => by_provider.push((event.provider(), vec![intent])),
        }
    }
    let mut credited = HashMap::new();
    for (provider, intents) in by_provider {
        let owners = ledger::owners(conn, provider, EntryKind::Credit, &intents).await?;
        for intent in intents {
            if let Some(owner) = owners.get(intent) {
                credited.insert((provider, intent), owner.clone());
            }
        }
    }
    Ok(credited)
}
