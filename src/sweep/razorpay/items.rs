//! What Razorpay's payments and refunds APIs list, as a sweep reads it
//! (hostile input: any field may be missing or of another type), and the
//! synthetic event envelope that carries what it applies.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::PROVIDER;
use crate::api::ApiFailure;
use crate::providers::is_identifier;

/// The events a sweep gives what it finds.
pub(super) const CAPTURED: &str = "payment.captured";
pub(super) const REFUNDED: &str = "refund.processed";

#[derive(Deserialize)]
pub(super) struct Collection {
    pub(super) items: Vec<Box<RawValue>>,
}

/// A payment or refund as listed: the fields the sweep reads, and its
/// exact bytes (what the event it becomes carries).
pub(super) struct Item {
    pub(super) head: Head,
    pub(super) raw: Box<RawValue>,
}

/// What the sweep reads of an item; any field may be missing or of
/// another type (hostile input), and is then absent.
#[derive(Deserialize)]
pub(super) struct Head {
    #[serde(default)]
    id: Value,
    #[serde(default)]
    created_at: Value,
    #[serde(default)]
    status: Value,
    #[serde(default)]
    pub(super) payment_id: Value,
}

impl Item {
    pub(super) fn read(raw: Box<RawValue>) -> Result<Self, ApiFailure> {
        let head = serde_json::from_str(raw.get())
            .map_err(|e| ApiFailure::Malformed(format!("an item: {e}"), PROVIDER))?;
        Ok(Item { head, raw })
    }

    pub(super) fn id(&self) -> Option<&str> {
        self.head.id.as_str().filter(|id| is_identifier(id))
    }

    pub(super) fn created_at(&self) -> Option<i64> {
        self.head.created_at.as_i64()
    }

    pub(super) fn status(&self) -> Option<&str> {
        self.head.status.as_str()
    }

    /// Captured, and possibly refunded since.
    pub(super) fn is_captured(&self) -> bool {
        matches!(self.status(), Some("captured" | "refunded"))
    }
}

/// The envelope of a synthetic event around listed entities.
#[derive(Serialize)]
struct Envelope<'a> {
    entity: &'static str,
    event: &'a str,
    contains: Vec<&'static str>,
    payload: Entities<'a>,
    created_at: Option<i64>,
}

#[derive(Serialize)]
struct Entities<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    payment: Option<Entity<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refund: Option<Entity<'a>>,
}

#[derive(Serialize)]
struct Entity<'a> {
    entity: &'a RawValue,
}

/// The body of the synthetic `event` of `item`, created when it was: a
/// payment's [`CAPTURED`], or a refund's [`REFUNDED`] with its `payment`
/// when given. The entities go in as listed, never re-encoded.
pub(super) fn envelope(
    event: &str,
    item: &Item,
    payment: Option<&RawValue>,
) -> serde_json::Result<Vec<u8>> {
    let own = Some(Entity { entity: &item.raw });
    let (payload, contains) = match (event, payment) {
        (REFUNDED, Some(entity)) => (
            Entities {
                payment: Some(Entity { entity }),
                refund: own,
            },
            vec!["payment", "refund"],
        ),
        (REFUNDED, None) => (
            Entities {
                payment: None,
                refund: own,
            },
            vec!["refund"],
        ),
        _ => (
            Entities {
                payment: own,
                refund: None,
            },
            vec!["payment"],
        ),
    };
    serde_json::to_vec(&Envelope {
        entity: "event",
        event,
        contains,
        payload,
        created_at: item.created_at(),
    })
}
