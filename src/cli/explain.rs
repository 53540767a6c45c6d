//! `webhookd explain <event id | payment id | user id>`: the story of one
//! thing, in order: each event received (verified and claimed), each ledger
//! entry, payment and subscription row, each outbox row with its delivery
//! attempts, and for a user the owners learned as theirs (which customer
//! or payment, by which event, conflicting claims) with the events that
//! taught them, and the payments that wait or waited in vain for an owner
//! the user may be ([`story::unowned`]). Read-only.

use std::io::Write;

use sqlx::PgPool;

use super::{MAX_SHOWN_TEXT_BYTES, id, shown};
use crate::story;

/// Prints the timeline; `false` when nothing is known about `subject`.
pub async fn run(pool: &PgPool, subject: &str, out: &mut impl Write) -> anyhow::Result<bool> {
    let (mut lines, unowned) = tokio::try_join!(
        story::timeline(pool, subject),
        story::unowned(pool, subject)
    )?;
    // Both are oldest first, their times written alike: merged in order.
    lines.extend(unowned);
    lines.sort_by(|a, b| a.0.cmp(&b.0));
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
