//! What became of an event: the outcome stored in
//! `processed_events.outcome`, and the one a delivery is answered with.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use sqlx::postgres::{PgTypeInfo, PgValueRef};
use sqlx::{Decode, Postgres, Type};

/// What became of one delivery. Stored in `processed_events.outcome` and
/// answered in the response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Effects applied.
    Processed,
    /// This event id was seen before; nothing new was written.
    Duplicate,
    /// Nothing to do: an unhandled type, or an effect another event already owns.
    Ignored,
    /// Older than the stored state; nothing changed.
    Superseded,
    /// Waits for an event it depends on; applied when that one arrives.
    Deferred,
    /// The payload can never be applied (reason in `detail`).
    Rejected,
    /// Claimed, its outcome not recorded yet: only ever stored, inside the
    /// transaction that claims it.
    Pending,
    /// Applied by an earlier handler before webhookd (`webhookd events
    /// import`): only ever stored, and never replayed.
    Imported,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Processed => "processed",
            Outcome::Duplicate => "duplicate",
            Outcome::Ignored => "ignored",
            Outcome::Superseded => "superseded",
            Outcome::Deferred => "deferred",
            Outcome::Rejected => "rejected",
            Outcome::Pending => "pending",
            Outcome::Imported => "imported",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A text that names no [`Outcome`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no such outcome: {0:?}")]
pub struct UnknownOutcome(pub String);

impl FromStr for Outcome {
    type Err = UnknownOutcome;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text {
            "processed" => Outcome::Processed,
            "duplicate" => Outcome::Duplicate,
            "ignored" => Outcome::Ignored,
            "superseded" => Outcome::Superseded,
            "deferred" => Outcome::Deferred,
            "rejected" => Outcome::Rejected,
            "pending" => Outcome::Pending,
            "imported" => Outcome::Imported,
            _ => return Err(UnknownOutcome(text.to_owned())),
        })
    }
}

/// Read from the `text` column (`query_as!(.. outcome as "outcome: Outcome"
/// ..)`); a value the schema's check allows and this type does not name is
/// a decoding error.
impl Type<Postgres> for Outcome {
    fn type_info() -> PgTypeInfo {
        <&str as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <&str as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for Outcome {
    fn decode(value: PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        Ok(<&str as Decode<Postgres>>::decode(value)?.parse()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_reads_back_from_its_text() {
        for outcome in [
            Outcome::Processed,
            Outcome::Duplicate,
            Outcome::Ignored,
            Outcome::Superseded,
            Outcome::Deferred,
            Outcome::Rejected,
            Outcome::Pending,
            Outcome::Imported,
        ] {
            assert_eq!(outcome.as_str().parse(), Ok(outcome));
            assert_eq!(
                serde_json::to_value(outcome).unwrap(),
                serde_json::json!(outcome.as_str())
            );
        }
        assert!("Processed".parse::<Outcome>().is_err());
    }
}
