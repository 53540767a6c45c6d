//! A time read from the database, and the one place it is written out:
//! RFC 3339 in UTC, `2026-12-01T15:30:00Z`, to the second unless asked for
//! more.

use std::fmt;

use serde::{Serialize, Serializer};
use sqlx::types::time::OffsetDateTime;

/// A `timestamptz` as read (`query_as!(.. at as "at: Timestamp" ..)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, sqlx::Type)]
#[sqlx(transparent)]
pub struct Timestamp(pub OffsetDateTime);

impl Timestamp {
    /// To the millisecond (truncated): `2026-12-01T15:30:00.123Z`.
    pub fn millis(&self) -> String {
        self.with_fraction(format_args!(".{:03}", self.utc().millisecond()))
    }

    /// To the microsecond: `2026-12-01T15:30:00.123456Z`.
    pub fn micros(&self) -> String {
        self.with_fraction(format_args!(".{:06}", self.utc().microsecond()))
    }

    fn utc(&self) -> OffsetDateTime {
        self.0.to_offset(sqlx::types::time::UtcOffset::UTC)
    }

    fn with_fraction(&self, fraction: fmt::Arguments<'_>) -> String {
        let t = self.utc();
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{fraction}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
        )
    }
}

/// To the second (truncated).
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.with_fraction(format_args!("")))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_is_written_in_utc_to_the_second_milli_or_microsecond_truncated() {
        // 2026-12-01T15:30:05.123456789 at +02:00.
        let at = OffsetDateTime::from_unix_timestamp_nanos(1_796_139_005_123_456_789)
            .unwrap()
            .to_offset(sqlx::types::time::UtcOffset::from_hms(2, 0, 0).unwrap());
        let at = Timestamp(at);
        assert_eq!(at.to_string(), "2026-12-01T15:30:05Z");
        assert_eq!(at.millis(), "2026-12-01T15:30:05.123Z");
        assert_eq!(at.micros(), "2026-12-01T15:30:05.123456Z");
        assert_eq!(format!("{at:<22}|"), "2026-12-01T15:30:05Z  |");
    }
}
