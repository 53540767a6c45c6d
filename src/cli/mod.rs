//! Operator commands. They call the same library entry points as the server
//! and write to the given output, so tests can read what they print.

pub mod drill;
pub mod events;
pub mod explain;
pub mod outbox;
pub mod prune;
pub mod reconcile;
pub mod send;
pub mod sweep;

use std::io::Write;
use std::time::Duration;

/// `webhookd healthcheck [URL]`: Ok when URL answers 2xx within 5 s.
pub async fn healthcheck(url: &str, out: &mut impl Write) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let status = client
        .get(url)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{url} did not answer: {}", e.without_url()))?
        .status();
    anyhow::ensure!(status.is_success(), "{url} answered {status}");
    writeln!(out, "ok: {status}")?;
    Ok(())
}
