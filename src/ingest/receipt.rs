//! The answer to a delivery, and to each event of a batch.

use serde::Serialize;

use super::Error;
use crate::events::Outcome;
use crate::providers::Event;

/// The answer to a delivery: `{"outcome": ..., "event_id": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    pub outcome: Outcome,
    pub event_id: String,
}

impl Receipt {
    pub(super) fn of(outcome: Outcome, event: &Event) -> Self {
        Receipt {
            outcome,
            event_id: event.event_id().to_owned(),
        }
    }
}

pub type Answer = Result<Receipt, Error>;
