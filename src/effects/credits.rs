//! Credits many to a statement, whichever provider's, and the payment rows
//! that captures record before their credit.

use super::Error;
use serde_json::json;
use sqlx::PgConnection;

use super::{Applied, PlainCredit, Plan, Reason, money, paypal, razorpay};
use crate::payments::{self, Payment, Recorded};
use crate::providers::{Event, Kind};

/// Applies events whose plans carry a credit ([`Plan::credit`]), in order,
/// the credits sharing their statements: first the payment rows of those
/// that record one ([`Plan::records_payment`]; a payment stored with another
/// amount or currency rejects its event), then the credits. Payment rows and
/// credits touch different tables, so the result is that of one event at a
/// time. Call with their plans' locks held.
pub async fn apply_credits(
    conn: &mut PgConnection,
    units: &[(&Event, &Plan)],
) -> Result<Vec<Applied>, Error> {
    let mut applied: Vec<Option<Applied>> = vec![None; units.len()];
    let mut crediting = Vec::with_capacity(units.len());
    for (i, (event, plan)) in units.iter().enumerate() {
        let credit = plan.credit.as_ref().ok_or(Error::Invariant(
            "a run of credits holds an event without a credit",
        ))?;
        if plan.records_payment
            && let Some(rejected) = record_capture(conn, event).await?
        {
            applied[i] = Some(rejected);
            continue;
        }
        crediting.push((i, (*event, credit)));
    }
    let credits: Vec<(&Event, &PlainCredit)> = crediting.iter().map(|(_, c)| *c).collect();
    for ((i, _), credited) in crediting
        .iter()
        .zip(money::credit_all(conn, &credits).await?)
    {
        applied[*i] = Some(credited);
    }
    applied
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or(Error::Invariant("a credit in the run has no outcome"))
}

/// A provider's payment as its event carries it: its row in `payments`.
pub(super) trait PaymentRow {
    fn row(&self) -> Payment<'_>;
}

/// Applies a capture as a run of one credit ([`apply_credits`]), which
/// records its payment row first, or rejects it with why `parsed` says it
/// can never apply.
pub(super) async fn apply_capture<T>(
    conn: &mut PgConnection,
    event: &Event,
    parsed: &Result<T, Reason>,
) -> Result<Applied, Error> {
    if let Err(reason) = parsed {
        return Ok(Applied::rejected(reason.as_str()));
    }
    let plan = super::plan(event);
    if plan.credit.is_none() {
        return Err(Error::Invariant("a well-formed capture plans no credit"));
    }
    let mut applied = apply_credits(conn, &[(event, &plan)]).await?;
    applied
        .pop()
        .ok_or(Error::Invariant("a capture has no outcome"))
}

/// Records a capture's payment row, before its credit, by its provider's
/// reading of it. `Some(rejected)` when the capture cannot apply or the
/// stored payment has another amount or currency: then nothing is credited.
async fn record_capture(conn: &mut PgConnection, event: &Event) -> Result<Option<Applied>, Error> {
    match event.kind() {
        Kind::Razorpay => record_captured_row(conn, event, &razorpay::capture(event)).await,
        Kind::Paypal => record_captured_row(conn, event, &paypal::capture(event)).await,
        Kind::Stripe | Kind::Source => Err(Error::Invariant(
            "only Razorpay and PayPal captures record a payment before crediting",
        )),
    }
}

/// Upserts the payment row of a capture (`parsed`: its payment and credit)
/// as the event that announces it: `Some(rejected)` when the capture cannot
/// apply or the stored payment has another amount or currency.
async fn record_captured_row<P: PaymentRow, C>(
    conn: &mut PgConnection,
    event: &Event,
    parsed: &Result<(P, C), Reason>,
) -> Result<Option<Applied>, Error> {
    let row = match parsed {
        Ok((payment, _)) => payment.row(),
        Err(reason) => return Ok(Some(Applied::rejected(reason.as_str()))),
    };
    Ok(
        match payments::upsert(conn, &row, Some(event.event_id())).await? {
            Recorded::Differs => Some(Applied::rejected(payments::DIFFERS)),
            Recorded::Recorded { .. } => None,
        },
    )
}

/// Upserts a payment row that only records a status (a failed, pending or
/// declined payment), or rejects the event with why `parsed` says it can
/// never apply. Its status never moves back, so it never undoes a capture.
pub(super) async fn record_status<P: PaymentRow>(
    conn: &mut PgConnection,
    parsed: &Result<P, Reason>,
) -> Result<Applied, Error> {
    let row = match parsed {
        Ok(payment) => payment.row(),
        Err(reason) => return Ok(Applied::rejected(reason.as_str())),
    };
    Ok(match payments::upsert(conn, &row, None).await? {
        Recorded::Recorded { .. } => Applied::processed(json!({ "payment_id": row.payment_id })),
        Recorded::Differs => Applied::rejected(payments::DIFFERS),
    })
}
