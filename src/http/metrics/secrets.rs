//! Which secret of each source's rotation list verified its deliveries, so
//! that an old secret (possibly leaked) can be known unused and removed.

use metrics::Label;

use super::Metrics;

pub(super) const MATCHED: &str = "webhookd_signature_secret_matched_total";
pub(super) const MATCHED_HELP: &str = "Verified deliveries by provider and the position of the secret (PayPal: webhook id) that matched.";

impl Metrics {
    /// A delivery to `provider` verified by its `index`-th secret.
    pub fn secret_matched(&self, provider: &str, index: usize) {
        let labels = vec![
            Label::new("provider", provider.to_owned()),
            Label::new("secret_index", index.to_string()),
        ];
        self.counter(MATCHED, labels).increment(1);
    }
}
