//! The outbox's sink of a draining process, from `WEBHOOKD_SINK_URL`, and
//! what start-up and `config check` say of it.

use secrecy::ExposeSecret;

use crate::clock::Clock;
use crate::config::ServeSettings;
use crate::secrets::non_empty;
use crate::sinks::log::LogSink;
use crate::sinks::{Problem, Sink, SinkSettings};

/// The sink `WEBHOOKD_SINK_URL` names by its scheme (`http(s)` needs
/// `WEBHOOKD_SINK_SECRET`; a broker signs when it is set), else the `log`
/// sink. Nothing connects yet.
pub fn sink(settings: &ServeSettings, clock: Clock) -> anyhow::Result<Sink> {
    let outbox = &settings.outbox;
    let Some(url) = non_empty(&outbox.sink_url) else {
        return Ok(Sink::Log(LogSink));
    };
    let secret = non_empty(&outbox.sink_secret);
    let secret = secret.as_ref().map(|secret| secret.expose_secret());
    let sink_settings = SinkSettings {
        timeout: outbox.sink_timeout,
        max_body_bytes: outbox.sink_max_body_bytes,
    };
    Sink::from_url(url.expose_secret(), secret, sink_settings, clock)
        .map_err(|error| anyhow::anyhow!("WEBHOOKD_SINK_URL: {error:#}"))
}

/// Checks a broker sink at start-up: credentials the broker refuses, or
/// an exchange or stream it does not have, stop the start; a broker that
/// cannot be reached now is only logged (deliveries wait and retry, and
/// readiness does not depend on it).
pub async fn check_sink(settings: &ServeSettings) -> anyhow::Result<()> {
    match sink_problem(settings).await {
        None => Ok(()),
        Some(Problem::Wrong(said)) => Err(anyhow::anyhow!("WEBHOOKD_SINK_URL: {said}")),
        Some(Problem::Unreachable(said)) => {
            tracing::warn!(problem = %said, "the sink cannot be reached now: deliveries wait and retry");
            Ok(())
        }
    }
}

/// What is wrong with the sink of a draining process, connecting to a
/// broker to find out ([`Sink::check`]); a URL that does not parse is
/// [`Problem::Wrong`].
pub async fn sink_problem(settings: &ServeSettings) -> Option<Problem> {
    if !settings.role.drains() {
        return None;
    }
    match sink(settings, Clock::System) {
        Ok(sink) => sink.check().await.err(),
        Err(error) => Some(Problem::Wrong(format!("{error:#}"))),
    }
}
