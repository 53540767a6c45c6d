//! What every sink sends for one outbox row, whatever carries it: one body
//! and one set of headers, so that a consumer verifies and dedupes a message
//! from RabbitMQ or NATS exactly as it does an HTTP delivery.
//!
//! Body: `{"type": topic, "timestamp": created_at, "data": payload,
//! "provider": ..., "event_id": ..., "event_type": ...}`; for a generic
//! source, `data` is the verified body and `event_type` its type (GitHub's
//! `X-GitHub-Event`, Shopify's `X-Shopify-Topic`). Headers: `webhook-id`
//! (the outbox id: stable across retries, the idempotency key),
//! `webhook-timestamp` and, under a secret, `webhook-signature` (Standard
//! Webhooks). A body larger than `WEBHOOKD_SINK_MAX_BODY_BYTES` is never
//! sent: the row is dead-lettered.

use std::time::Duration;

use super::{Delivery, Message};
use crate::clock::Clock;
use crate::providers::standard::Signer;

/// How a sink seals its rows: under its secret (if it has one), at its
/// clock's time, within its body limit.
#[derive(Clone)]
pub struct Sealer {
    signer: Option<Signer>,
    clock: Clock,
    max_body_bytes: u64,
}

impl Sealer {
    /// `secret`: a Standard Webhooks secret (`whsec_` and base64), or none.
    pub fn new(secret: Option<&str>, clock: Clock, max_body_bytes: u64) -> anyhow::Result<Self> {
        let signer = secret.map(Signer::new).transpose().map_err(|_| {
            anyhow::anyhow!(
                "the sink's secret must be a Standard Webhooks secret: whsec_ followed by base64"
            )
        })?;
        Ok(Sealer {
            signer,
            clock,
            max_body_bytes,
        })
    }

    /// The largest body sent (`WEBHOOKD_SINK_MAX_BODY_BYTES`).
    #[must_use]
    pub fn with_max_body_bytes(mut self, max_body_bytes: u64) -> Self {
        self.max_body_bytes = max_body_bytes;
        self
    }

    /// [`Envelope::seal`] now.
    pub fn seal(&self, message: Message) -> Result<Envelope, Delivery> {
        Envelope::seal(
            message,
            self.signer.as_ref(),
            self.clock.now(),
            self.max_body_bytes,
        )
    }

    pub fn now(&self) -> i64 {
        self.clock.now()
    }

    /// Seals `message` and has `send` deliver it within `timeout`; past it,
    /// a retry saying `late` (no confirm, no ack).
    pub async fn send_within<F: Future<Output = Delivery>>(
        &self,
        message: Message,
        timeout: Duration,
        late: impl FnOnce() -> String,
        send: impl FnOnce(Envelope) -> F,
    ) -> Delivery {
        let sealed = match self.seal(message) {
            Ok(sealed) => sealed,
            Err(refused) => return refused,
        };
        match tokio::time::timeout(timeout, send(sealed)).await {
            Ok(delivery) => delivery,
            Err(_) => Delivery::Retry {
                error: format!("{} within {timeout:?}", late()),
                retry_after: None,
            },
        }
    }
}

/// One row, ready to send.
#[derive(Debug)]
pub struct Envelope {
    /// The outbox id, as text.
    pub id: String,
    pub topic: String,
    pub body: Vec<u8>,
    /// Unix seconds, when it was sealed (each attempt anew).
    pub timestamp: i64,
    /// `v1,<base64>` when the sink has a secret.
    pub signature: Option<String>,
}

impl Envelope {
    /// Builds the body (freeing the leased copy of the payload) and signs
    /// it at `now` under `signer`; a body over `max_body_bytes` is a
    /// permanent failure, never sent.
    pub fn seal(
        message: Message,
        signer: Option<&Signer>,
        now: i64,
        max_body_bytes: u64,
    ) -> Result<Envelope, Delivery> {
        let body = body(&message);
        let Message { id, topic, .. } = message;
        if body.len() as u64 > max_body_bytes {
            return Err(Delivery::Permanent {
                error: format!(
                    "not sent: the body is {} bytes, over the sink's limit of {max_body_bytes} (WEBHOOKD_SINK_MAX_BODY_BYTES)",
                    body.len(),
                ),
            });
        }
        let id = id.to_string();
        let signature = signer.map(|signer| signer.sign(&id, now, &body));
        Ok(Envelope {
            id,
            topic,
            body,
            timestamp: now,
            signature,
        })
    }

    /// The identifying and signing headers, in the order sent.
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        [
            Some(("webhook-id", self.id.clone())),
            Some(("webhook-timestamp", self.timestamp.to_string())),
            self.signature
                .as_ref()
                .map(|signature| ("webhook-signature", signature.clone())),
        ]
        .into_iter()
        .flatten()
    }
}

/// The body, built once, with the payload spliced in as Postgres wrote it
/// (`jsonb` output is always valid JSON), never parsed or copied twice.
fn body(message: &Message) -> Vec<u8> {
    fn string(body: &mut Vec<u8>, value: Option<&str>) {
        serde_json::to_writer(body, &value).expect("a string serializes into a Vec");
    }
    let mut body = Vec::with_capacity(message.payload.len() + 256);
    body.extend_from_slice(br#"{"type":"#);
    string(&mut body, Some(&message.topic));
    body.extend_from_slice(br#","timestamp":"#);
    string(&mut body, Some(&message.created_at));
    body.extend_from_slice(br#","data":"#);
    body.extend_from_slice(message.payload.as_bytes());
    body.extend_from_slice(br#","provider":"#);
    string(&mut body, Some(&message.provider));
    body.extend_from_slice(br#","event_id":"#);
    string(&mut body, Some(&message.event_id));
    body.extend_from_slice(br#","event_type":"#);
    string(&mut body, message.event_type.as_deref());
    body.push(b'}');
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: &str) -> Message {
        Message {
            id: 7,
            topic: "wallet.credited".into(),
            provider: "stripe".into(),
            event_id: "evt_\"quoted\"\n".into(),
            event_type: None,
            payload: payload.into(),
            attempts: 1,
            created_at: "2026-12-01T00:00:00.000000Z".into(),
        }
    }

    #[test]
    fn the_body_carries_the_payload_as_stored_and_escapes_the_rest() {
        let message = message(r#"{"amount_minor": 1500, "user_id": "u1"}"#);
        let body: serde_json::Value = serde_json::from_slice(&body(&message)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "type": "wallet.credited",
                "timestamp": "2026-12-01T00:00:00.000000Z",
                "data": {"amount_minor": 1500, "user_id": "u1"},
                "provider": "stripe",
                "event_id": "evt_\"quoted\"\n",
                "event_type": null,
            })
        );
    }

    #[test]
    fn a_sealed_row_is_signed_under_a_secret_and_refused_over_the_limit() {
        let signer = Signer::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sealed = Envelope::seal(message("{}"), Some(&signer), 1_700_000_000, 1 << 20).unwrap();
        let headers: Vec<_> = sealed.headers().collect();
        assert_eq!(headers[0], ("webhook-id", "7".to_owned()));
        assert_eq!(headers[1], ("webhook-timestamp", "1700000000".to_owned()));
        assert_eq!(
            headers[2].1,
            signer.sign("7", 1_700_000_000, &sealed.body),
            "the signature is over the body sent"
        );
        let unsigned = Envelope::seal(message("{}"), None, 1_700_000_000, 1 << 20).unwrap();
        assert_eq!(unsigned.headers().count(), 2, "no secret, no signature");
        let refused = Envelope::seal(message("{}"), None, 1_700_000_000, 10).unwrap_err();
        assert!(
            matches!(&refused, Delivery::Permanent { error } if error.contains("WEBHOOKD_SINK_MAX_BODY_BYTES")),
            "{refused:?}"
        );
    }
}
