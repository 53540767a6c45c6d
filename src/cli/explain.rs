//! `webhookd explain <event id | payment id | user id>`: the story of one
//! thing, in order: each event received (verified and claimed), each ledger
//! entry, payment and subscription row, and each outbox row with its
//! delivery attempts. Read-only.

use std::io::Write;

use sqlx::PgPool;

use super::{MAX_SHOWN_TEXT_BYTES, id, shown};
use crate::story::timeline;

/// Prints the timeline; `false` when nothing is known about `subject`.
pub async fn run(pool: &PgPool, subject: &str, out: &mut impl Write) -> anyhow::Result<bool> {
    let lines = timeline(pool, subject).await?;
    if lines.is_empty() {
        writeln!(
            out,
            "nothing is known about {} (or it was pruned)",
            id(subject)
        )?;
        return Ok(false);
    }
    for (at, line) in lines {
        // Lines quote ids, details and errors from the network.
        writeln!(out, "{}  {}", at, shown(&line, MAX_SHOWN_TEXT_BYTES))?;
    }
    Ok(true)
}
