//! The console's counter: tokens its rate limit refused unchecked, by the
//! bucket that refused (`client`: one address's; `global`: every client's
//! together, which only many guessing addresses empty).

use metrics::Label;

use super::Metrics;

pub(super) const THROTTLED: &str = "webhookd_console_auth_throttled_total";
pub(super) const THROTTLED_HELP: &str = "Console tokens (logins, bearers) refused unchecked by the rate limit, by the bucket that refused.";

impl Metrics {
    /// `count` more tokens refused by the `scope` bucket (`client` or
    /// `global`); 0 shows the counter before the first.
    pub fn console_auth_throttled(&self, scope: &'static str, count: u64) {
        self.counter(THROTTLED, vec![Label::from_static_parts("scope", scope)])
            .increment(count);
    }
}
