//! Each sink of the configuration, reached as its drainer would reach it.

use super::Check;
use super::local::bounded;
use crate::config::{DEFAULT_SINK, SinkEntry};
use crate::sinks::Sink;

/// `sink.<name>` for every sink: reached (an HTTP receiver answers a
/// `HEAD`, a broker takes the credentials), or what stood in the way.
pub(super) async fn reached(sinks: &Result<Vec<(SinkEntry, Sink)>, String>) -> Vec<Check> {
    let configured = match sinks {
        Ok(configured) => configured,
        Err(error) => {
            return vec![Check::fail(
                "sink",
                bounded(error),
                "mend the sink's settings (`webhookd config check` lists every problem)",
            )];
        }
    };
    let reached = configured.iter().map(|(entry, sink)| async move {
        let check = format!("sink.{}", entry.name);
        let url = entry.url_variable();
        match (sink, sink.reach().await) {
            (Sink::Log(_), _) if entry.name == DEFAULT_SINK => Check::warn(
                check,
                "no sink is configured: the outbox's events are written to the log, and reach none of your systems",
                "set WEBHOOKD_SINK_URL (and WEBHOOKD_SINK_SECRET) to your receiver, or a broker's URL",
            ),
            (_, Ok(reached)) if reached.troubled => Check::warn(
                check,
                format!("{}: it is reached, but fails", reached.said),
                format!(
                    "deliveries to it fail and retry until it answers 2xx: look at the receiver \
                     behind {url}'s host"
                ),
            ),
            (_, Ok(reached)) => Check::ok(check, reached.said),
            (_, Err(problem)) => Check::fail(
                check,
                bounded(&problem.to_string()),
                format!(
                    "start the receiver or mend {url}; deliveries wait and retry meanwhile, \
                     and become dead letters after WEBHOOKD_OUTBOX_MAX_ATTEMPTS"
                ),
            ),
        }
    });
    // All at once, each within its sink's timeout; in the configuration's
    // order.
    futures_util::future::join_all(reached).await
}
