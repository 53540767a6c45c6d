//! Generic sources (Standard Webhooks, GitHub, Shopify) and `record`
//! sources of any scheme: the effect is one outbox row `source.<name>`
//! carrying the verified payload, claimed and written in the same
//! transaction as the event; many events to a statement. Stripe's thin
//! events of types webhookd does not apply go the same way, as
//! `stripe.thin` with the event Stripe's API served.

use serde_json::json;
use sqlx::PgConnection;

use super::Decoded;
use super::effect::{Applied, Effect, Error};
use crate::outbox;

/// Forwards each event ([`Effect::Forward`]: `source.<name>`, processed;
/// [`Effect::Thin`]: `stripe.thin`, ignored) as one outbox row carrying its
/// object, in one statement whatever their number. Each row is its own
/// stream (no ordering key), so their order is only that of their ids.
pub(super) async fn forward_all(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let topics = units
        .iter()
        .map(|unit| {
            let event = unit.event();
            match unit.effect() {
                Effect::Forward => Ok(format!(
                    "source.{}",
                    event.source().unwrap_or(event.provider())
                )),
                Effect::Thin => Ok(THIN_TOPIC.to_owned()),
                _ => Err(Error::Invariant("a set of forwarded events holds another")),
            }
        })
        .collect::<Result<Vec<String>, Error>>()?;
    let messages: Vec<outbox::Message<'_>> = units
        .iter()
        .zip(&topics)
        .map(|(unit, topic)| {
            let event = unit.event();
            outbox::Message {
                topic,
                provider: event.provider(),
                event_id: event.event_id(),
                event_type: Some(event.event_type()),
                payload: event.object(),
                ordering_key: None,
                account: event.account(),
            }
        })
        .collect();
    let outbox_ids = outbox::enqueue(conn, &messages).await?;
    if outbox_ids.len() != units.len() {
        return Err(Error::Invariant("a forwarded event has no outbox row"));
    }
    Ok(units
        .iter()
        .zip(outbox_ids)
        .map(|(unit, outbox_id)| match unit.effect() {
            Effect::Thin => Applied::ignored_with(json!({
                "reason": "a thin event of a type webhookd does not apply: forwarded as stripe.thin",
                "outbox_id": outbox_id,
            })),
            _ => Applied::processed(json!({ "outbox_id": outbox_id })),
        })
        .collect())
}

/// The outbox topic of a Stripe thin event webhookd does not apply.
pub const THIN_TOPIC: &str = "stripe.thin";
