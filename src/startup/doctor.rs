//! `webhookd doctor`'s checks ([`crate::doctor`]) of a configuration, with
//! the sources and sinks built from it as `serve` builds them: for the
//! command, and for the console's page of the running process.

use sqlx::PgPool;

use crate::clock::Clock;
use crate::config::ServeSettings;
use crate::doctor::{self, Check, Setup};
use crate::providers::Source;

/// Every check of `settings`, its database on `pool`, as of `clock`.
pub async fn examine(settings: &ServeSettings, pool: &PgPool, clock: &Clock) -> Vec<Check> {
    let sources: Vec<Source> = match super::providers_settings(settings) {
        Ok(providers) => (providers.sources.into_iter())
            .filter(Source::mounted)
            .collect(),
        Err(_) => Vec::new(),
    };
    let sinks = super::sinks(settings, clock)
        .map(|configured| {
            (configured.into_iter())
                .map(|super::Configured { entry, sink }| (entry, sink))
                .collect()
        })
        .map_err(|error| format!("{error:#}"));
    let setup = Setup {
        settings,
        sources: &sources,
        sinks: &sinks,
        pool,
        clock,
    };
    doctor::examine(&setup).await
}
