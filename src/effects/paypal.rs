//! PayPal's effects (the README's "PayPal" section).

use sqlx::PgConnection;

use super::plan::Plan;
use super::{Applied, Error};
use crate::providers::Event;

pub use crate::providers::paypal::PROVIDER;

pub async fn apply(_conn: &mut PgConnection, _event: &Event) -> Result<Applied, Error> {
    Ok(Applied::ignored("event type has no effect"))
}

/// What `event` will lock ([`super::plan`]).
pub(super) fn plan(_event: &Event) -> Plan {
    Plan::default()
}
