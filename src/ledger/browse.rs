//! A user's wallets and entries, and an event's entries, as the console
//! shows them.

use crate::db::{self, Timestamp};
use sqlx::PgPool;

#[derive(Debug, Clone)]
pub struct WalletRow {
    pub user_id: String,
    pub currency: String,
    pub balance_minor: i64,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone)]
pub struct EntryRow {
    pub id: i64,
    pub user_id: String,
    pub currency: String,
    pub amount_minor: i64,
    pub kind: String,
    pub provider: String,
    pub source_ref: String,
    pub event_id: String,
    pub created_at: Timestamp,
}

pub async fn wallets_of_user(pool: &PgPool, user_id: &str) -> Result<Vec<WalletRow>, sqlx::Error> {
    let query = sqlx::query_as!(
        WalletRow,
        r#"
        select user_id, currency, balance_minor,
               updated_at as "updated_at!: Timestamp"
        from wallets where user_id = $1
        order by currency
        "#,
        user_id,
    );
    db::read_only(pool).all(query).await
}

/// The user's newest entries first, up to `limit`.
pub async fn entries_of_user(
    pool: &PgPool,
    user_id: &str,
    limit: i64,
) -> Result<Vec<EntryRow>, sqlx::Error> {
    let query = sqlx::query_as!(
        EntryRow,
        r#"
        select id, user_id, currency, amount_minor, kind, provider, source_ref, event_id,
               created_at as "created_at!: Timestamp"
        from wallet_entries where user_id = $1
        order by id desc
        limit $2
        "#,
        user_id,
        limit,
    );
    db::read_only(pool).all(query).await
}

/// The entries an event wrote.
pub async fn entries_of_event(
    pool: &PgPool,
    provider: &str,
    event_id: &str,
) -> Result<Vec<EntryRow>, sqlx::Error> {
    let query = sqlx::query_as!(
        EntryRow,
        r#"
        select id, user_id, currency, amount_minor, kind, provider, source_ref, event_id,
               created_at as "created_at!: Timestamp"
        from wallet_entries where event_id = $2 and provider = $1
        order by id
        "#,
        provider,
        event_id,
    );
    db::read_only(pool).all(query).await
}
