//! `webhookd erase user <id> [--dry-run]`: a user's personal data removed
//! on request ([`crate::erasure`]); prints one JSON line.

use std::io::Write;

use clap::Subcommand;
use sqlx::PgPool;

use super::json_line;

#[derive(Debug, Subcommand)]
pub enum EraseCommand {
    /// Remove the personal data (payloads, free-text detail) of a user's
    /// events and outbox rows; amounts, keys, outcomes and the ledger stay.
    /// Safe while serving; erasing again changes nothing.
    User {
        /// The user id webhookd credits (`metadata.user_id`, the owner).
        user_id: String,
        /// Count what would be erased; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

pub async fn run(
    pool: &PgPool,
    command: &EraseCommand,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let EraseCommand::User { user_id, dry_run } = command;
    let erased = crate::erasure::erase_user(pool, user_id, *dry_run).await?;
    writeln!(out, "{}", json_line(&erased)?)?;
    Ok(())
}
