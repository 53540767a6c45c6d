//! The outbox's sinks of a draining process, from `WEBHOOKD_SINK_URL` and
//! `WEBHOOKD_SINK_<NAME>_URL`, and what start-up and `config check` say of
//! them.

use secrecy::ExposeSecret;

use crate::clock::Clock;
use crate::config::{ServeSettings, SinkEntry};
use crate::sinks::log::LogSink;
use crate::sinks::{NeedsSecret, Problem, Sink, SinkSettings};

/// A sink of the configuration, built: its entry, and what delivers to it.
pub struct Configured {
    pub entry: SinkEntry,
    pub sink: Sink,
}

/// Every sink of `settings` ([`crate::config::OutboxSettings::every_sink`]),
/// each by its URL's scheme (`http(s)` needs its secret; a broker signs
/// when it is set), the `log` sink for `default` when it has none. Nothing
/// connects yet. Every problem is said, each with its variable.
pub fn sinks(settings: &ServeSettings, clock: &Clock) -> anyhow::Result<Vec<Configured>> {
    let outbox = &settings.outbox;
    let sink_settings = SinkSettings {
        timeout: outbox.sink_timeout,
        max_body_bytes: outbox.sink_max_body_bytes,
    };
    let mut configured = Vec::new();
    let mut problems = Vec::new();
    for entry in outbox.every_sink()? {
        let Some(url) = &entry.url else {
            configured.push(Configured {
                entry,
                sink: Sink::Log(LogSink),
            });
            continue;
        };
        let secret = entry.secret.as_ref().map(ExposeSecret::expose_secret);
        match Sink::from_url(url.expose_secret(), secret, sink_settings, clock.clone()) {
            Ok(sink) => configured.push(Configured { entry, sink }),
            Err(error) if error.is::<NeedsSecret>() => problems.push(format!(
                "{}: {error} ({})",
                entry.url_variable(),
                entry.secret_variable()
            )),
            Err(error) => problems.push(format!("{}: {error:#}", entry.url_variable())),
        }
    }
    match problems.as_slice() {
        [] => Ok(configured),
        [one] => anyhow::bail!("{one}"),
        many => anyhow::bail!("{}", many.join("\n")),
    }
}

/// Checks the broker sinks at start-up: credentials a broker refuses, or
/// an exchange or stream it does not have, stop the start; a broker that
/// cannot be reached now is only logged (deliveries to it wait and retry,
/// and readiness does not depend on it).
pub async fn check_sinks(settings: &ServeSettings) -> anyhow::Result<()> {
    let mut wrong = Vec::new();
    for problem in sink_problems(settings).await {
        match problem {
            Problem::Wrong(said) => wrong.push(said),
            Problem::Unreachable(said) => tracing::warn!(
                problem = %said,
                "a sink cannot be reached now: deliveries to it wait and retry"
            ),
        }
    }
    match wrong.as_slice() {
        [] => Ok(()),
        many => anyhow::bail!("{}", many.join("\n")),
    }
}

/// What is wrong with each sink of a draining process, each said after the
/// variable of its URL, connecting to a broker to find out
/// ([`Sink::check`]); URLs that do not parse are [`Problem::Wrong`].
pub async fn sink_problems(settings: &ServeSettings) -> Vec<Problem> {
    if !settings.role.drains() {
        return Vec::new();
    }
    let configured = match sinks(settings, &Clock::System) {
        Ok(configured) => configured,
        Err(error) => return vec![Problem::Wrong(format!("{error:#}"))],
    };
    let mut problems = Vec::new();
    for Configured { entry, sink } in configured {
        let variable = entry.url_variable();
        match sink.check().await {
            Ok(()) => {}
            Err(Problem::Wrong(said)) => {
                problems.push(Problem::Wrong(format!("{variable}: {said}")))
            }
            Err(Problem::Unreachable(said)) => {
                problems.push(Problem::Unreachable(format!("{variable}: {said}")));
            }
        }
    }
    problems
}
