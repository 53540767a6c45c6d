//! Generic sources (Standard Webhooks, GitHub, Shopify) and `record`
//! sources of any scheme: the effect is one outbox row `source.<name>`
//! carrying the verified payload, claimed and written in the same
//! transaction as the event; many events to a statement.

use serde_json::json;
use sqlx::PgConnection;

use super::Decoded;
use super::effect::{Applied, Effect, Error};
use crate::outbox;

/// Forwards each event ([`Effect::Forward`]) as its source's outbox row, in
/// one statement whatever their number. Each row is its own stream (no
/// ordering key), so their order is only that of their ids.
pub(super) async fn forward_all(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let topics = units
        .iter()
        .map(|unit| match unit.effect() {
            Effect::Forward => {
                let event = unit.event();
                Ok(format!(
                    "source.{}",
                    event.source().unwrap_or(event.provider())
                ))
            }
            _ => Err(Error::Invariant("a set of forwarded events holds another")),
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
            }
        })
        .collect();
    let outbox_ids = outbox::enqueue(conn, &messages).await?;
    if outbox_ids.len() != units.len() {
        return Err(Error::Invariant("a forwarded event has no outbox row"));
    }
    Ok(outbox_ids
        .into_iter()
        .map(|outbox_id| Applied::processed(json!({ "outbox_id": outbox_id })))
        .collect())
}
