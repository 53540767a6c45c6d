//! Generic sources (Standard Webhooks, GitHub, Shopify) and `record`
//! sources of any scheme: the effect is one outbox row `source.<name>`
//! carrying the verified payload, claimed and written in the same
//! transaction as the event.

use serde_json::json;
use sqlx::PgConnection;

use super::effect::{Applied, Error};
use crate::outbox;
use crate::providers::Event;

pub(super) async fn forward(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    let topic = format!("source.{}", event.source().unwrap_or(event.provider()));
    let message = outbox::Message {
        topic: &topic,
        provider: event.provider(),
        event_id: event.event_id(),
        event_type: Some(event.event_type()),
        payload: event.object(),
        ordering_key: None,
    };
    let outbox_id = outbox::enqueue_one(conn, message).await?;
    Ok(Applied::processed(json!({ "outbox_id": outbox_id })))
}
