//! `webhookd erase user <id>`: the personal data of a user's recorded
//! events and outbox rows removed on request (GDPR), in one transaction
//! that is safe while serving: it locks only those events' rows.
//!
//! A user's events are those `webhookd explain <id>` tells of
//! (`related_events`: the events that credited or debited their wallets,
//! wrote their payments and subscriptions, or taught webhookd that a
//! customer or payment is theirs). Their payloads and free-text detail go
//! ([`events::erase`]), and so do their outbox rows' ([`outbox`]'s erase:
//! a row not delivered yet is dead-lettered and never delivered). Amounts,
//! keys, outcomes and the ledger stay. An event still waiting for a
//! dependency keeps its payload, which it has yet to apply, and is counted
//! `kept_waiting`: erase again once it has applied. Each erasure that
//! changed anything is recorded in `erasures`; erasing again changes
//! nothing and says so.

use serde::Serialize;
use sqlx::PgPool;

use crate::db;
use crate::events;
use crate::outbox::store::erase as outbox_erase;

/// The one JSON line `webhookd erase user` prints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Erased {
    pub user_id: String,
    /// Events of the user's found.
    pub events: u64,
    /// Erased now (in a dry run: that would be).
    pub erased: u64,
    /// Erased before.
    pub already_erased: u64,
    /// Waiting for a dependency: kept, to be erased once applied.
    pub kept_waiting: u64,
    /// Outbox rows erased now (in a dry run: 0; their events are counted).
    pub outbox_rows: u64,
    pub dry_run: bool,
}

/// Erases `user_id`'s events and outbox rows, or (`dry_run`) counts what
/// would be, writing nothing.
pub async fn erase_user(pool: &PgPool, user_id: &str, dry_run: bool) -> anyhow::Result<Erased> {
    anyhow::ensure!(
        crate::providers::is_identifier(user_id),
        "a user id is 1 to 255 printable characters without spaces"
    );
    let mut tx = db::begin(pool).await?;
    let found = events::erase::of_user(&mut tx, user_id).await?;
    let mut erased = Erased {
        user_id: user_id.to_owned(),
        events: found.len() as u64,
        dry_run,
        ..Erased::default()
    };
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for event in &found {
        match (event.erased_at, event.waiting) {
            (Some(_), _) => erased.already_erased += 1,
            (None, true) => erased.kept_waiting += 1,
            (None, false) => keys.push((&event.provider, &event.event_id)),
        }
    }
    if dry_run {
        erased.erased = keys.len() as u64;
        tx.rollback().await?;
        return Ok(erased);
    }
    erased.erased = events::erase::erase(&mut tx, &keys).await?;
    erased.outbox_rows = outbox_erase::erase(&mut tx, &keys).await?;
    if erased.erased > 0 || erased.outbox_rows > 0 {
        record(&mut tx, &erased).await?;
    }
    tx.commit().await?;
    Ok(erased)
}

/// Records that `erased` happened, and when (the transaction's time).
async fn record(conn: &mut sqlx::PgConnection, erased: &Erased) -> Result<(), sqlx::Error> {
    let count = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
    sqlx::query!(
        "insert into erasures (user_id, events, outbox_rows) values ($1, $2, $3)",
        erased.user_id,
        count(erased.erased),
        count(erased.outbox_rows),
    )
    .execute(conn)
    .await?;
    Ok(())
}
