//! Payments whose owner is learned rather than written on them: a credit
//! finds its owner, or waits for it ([`credit_unowned`]); a payment that
//! pays an invoice is the invoice's ([`link_invoice`], [`pays_invoice`]).

use serde_json::json;
use sqlx::PgConnection;

use super::credits;
use super::effect::{Applied, Error, Owed, PaymentRecord};
use crate::owners::{self, Candidate, Subject};
use crate::providers::Event;
use crate::{events, invoices};

/// Credits `owed` to the first of `candidates` that yields an owner, after
/// recording its `payment` row if it carries one; a
/// payment that pays an invoice is the invoice's; with no owner known yet
/// the event waits for one (`deferred`). Call with its plan's locks held
/// (its owner's wallet among them: the engine resolves it the same way).
pub(super) async fn credit_unowned(
    conn: &mut PgConnection,
    event: &Event,
    owed: &Owed,
    candidates: &[Candidate],
    payment: Option<&PaymentRecord>,
) -> Result<Applied, Error> {
    let provider = event.provider();
    if let Some(invoice) = invoices::paid_by(conn, provider, &owed.source_ref).await? {
        return Ok(pays_invoice(&invoice));
    }
    match owners::resolve(conn, provider, candidates).await? {
        Some(user_id) => {
            let credit = owed.to(user_id);
            if let Some(payment) = payment {
                let row = PaymentRecord {
                    user_id: Some(credit.user_id.clone()),
                    ..payment.clone()
                };
                if let Some(rejected) = credits::record_capture(conn, event, &row).await? {
                    return Ok(rejected);
                }
            }
            credits::credit_one(conn, event, &credit).await
        }
        None => {
            let waits_for = wait_for(candidates, &owed.source_ref);
            events::defer(conn, provider, event.event_id(), &waits_for).await?;
            Ok(Applied::deferred(&waits_for))
        }
    }
}

/// What a payment without a known owner waits for: its customer's owner
/// when its rule reads one, else its own (a Checkout Session teaches both).
fn wait_for(candidates: &[Candidate], payment: &str) -> String {
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
