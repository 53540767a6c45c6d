//! "Now", injectable so that tests never sleep or race the wall clock.

use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy, Default)]
pub enum Clock {
    #[default]
    System,
    /// Always the given Unix time, in seconds.
    Fixed(i64),
}

impl Clock {
    /// Unix seconds.
    pub fn now(&self) -> i64 {
        match self {
            Clock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
            Clock::Fixed(now) => *now,
        }
    }
}
