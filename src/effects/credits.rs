//! Credits many to a statement, whichever provider's.

use super::Error;
use sqlx::PgConnection;

use super::{Applied, PlainCredit, Plan, money, razorpay};
use crate::providers::Event;

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
            && let Some(rejected) = razorpay::record_capture(conn, event).await?
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
