//! `webhookd reconcile`: every wallet balance equals the sum of its entries,
//! and every entry within the retention window has its event.

use std::io::Write;

use sqlx::PgPool;

use crate::clock::Clock;
use crate::config::RetentionArgs;
use crate::ledger;

/// Ok(true) when everything reconciles; mismatches are printed.
pub async fn run(
    pool: &PgPool,
    retention: &RetentionArgs,
    out: &mut impl Write,
) -> anyhow::Result<bool> {
    let mut conn = pool.acquire().await?;
    let mismatches = ledger::mismatches(&mut conn).await?;
    for m in &mismatches {
        writeln!(
            out,
            "MISMATCH wallet {} {}: balance {} but entries sum to {}",
            m.user_id, m.currency, m.balance_minor, m.entries_minor
        )?;
    }
    #[allow(clippy::cast_precision_loss)]
    let since = (Clock::System.now() as f64) - retention.window().as_secs_f64();
    let orphans = ledger::orphan_entries(&mut conn, since).await?;
    for (id, provider, event_id) in &orphans {
        writeln!(
            out,
            "ORPHAN entry {id}: its event {provider} {event_id} is not recorded"
        )?;
    }
    let ok = mismatches.is_empty() && orphans.is_empty();
    writeln!(
        out,
        "{}: {} wallet mismatches, {} entries without their event",
        if ok { "ok" } else { "FAILED" },
        mismatches.len(),
        orphans.len()
    )?;
    Ok(ok)
}
