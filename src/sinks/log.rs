//! Logs each message (without its payload) and calls it delivered.

use super::{Delivery, Message};

#[derive(Debug, Clone, Default)]
pub struct LogSink;

impl LogSink {
    pub fn deliver(&self, message: &Message) -> Delivery {
        tracing::info!(
            outbox_id = message.id,
            topic = %message.topic,
            provider = %message.provider,
            event_id = %message.event_id,
            attempt = message.attempts,
            "outbox message"
        );
        Delivery::Delivered
    }
}
