//! The API versions of the Stripe events each source receives, beside the
//! one it expects (`WEBHOOKD_SOURCE_<NAME>_API_VERSION`): how an upgrade
//! with two endpoints is watched, in `/metrics` and on the console.

use std::collections::BTreeMap;
use std::sync::Mutex;

use metrics::Label;

use super::Metrics;

pub(super) const API_VERSIONS: &str = "webhookd_stripe_api_version_events_total";
pub(super) const API_VERSIONS_HELP: &str = "Verified Stripe deliveries by source, the API version their object is rendered in, and whether it is the version the source expects (WEBHOOKD_SOURCE_<NAME>_API_VERSION): yes, no, or unset.";

/// Most (source, version) pairs counted; past it a new pair is counted as
/// version `other`. Stripe has a handful of versions at a time.
const MOST_PAIRS: usize = 64;

/// One source's deliveries of one API version, since start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionCount {
    pub source: String,
    pub api_version: String,
    /// `yes`, `no` or `unset`: see [`API_VERSIONS_HELP`].
    pub expected: &'static str,
    pub events: u64,
}

/// Each (source, version) pair counted: whether it is expected, and how
/// many.
type Counted = BTreeMap<(String, String), (&'static str, u64)>;

/// The pairs counted, for the console.
#[derive(Debug, Default)]
pub(super) struct Versions(Mutex<Counted>);

impl Metrics {
    /// A verified delivery to `source` rendered in `api_version`, which
    /// the source expects (`Some(true)`), does not (`Some(false)`), or
    /// names none (`None`).
    pub fn api_version(&self, source: &str, api_version: &str, expected: Option<bool>) {
        let expected = match expected {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unset",
        };
        let version = {
            let mut counted = self.versions.0.lock().expect("never poisoned");
            let mut key = (source.to_owned(), api_version.to_owned());
            if counted.len() >= MOST_PAIRS && !counted.contains_key(&key) {
                key.1 = "other".to_owned();
            }
            let entry = counted.entry(key.clone()).or_insert((expected, 0));
            *entry = (expected, entry.1 + 1);
            key.1
        };
        let labels = vec![
            Label::new("source", source.to_owned()),
            Label::new("api_version", version),
            Label::from_static_parts("expected", expected),
        ];
        self.counter(API_VERSIONS, labels).increment(1);
    }

    /// Every source's deliveries by API version since start, by source
    /// and version.
    pub fn api_versions(&self) -> Vec<VersionCount> {
        let counted = self.versions.0.lock().expect("never poisoned");
        counted
            .iter()
            .map(|((source, api_version), (expected, events))| VersionCount {
                source: source.clone(),
                api_version: api_version.clone(),
                expected,
                events: *events,
            })
            .collect()
    }
}
