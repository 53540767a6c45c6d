//! A user's wallets and entries, and an event's entries, as the console
//! shows them.

use crate::db;
use sqlx::PgPool;

#[derive(Debug, Clone)]
pub struct WalletRow {
    pub user_id: String,
    pub currency: String,
    pub balance_minor: i64,
    pub updated_at: String,
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
    pub created_at: String,
}

pub async fn wallets_of_user(pool: &PgPool, user_id: &str) -> Result<Vec<WalletRow>, sqlx::Error> {
    db::read_only(pool)
        .all(sqlx::query_as!(
            WalletRow,
            r#"
        select user_id, currency, balance_minor,
               to_char(updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as "updated_at!"
        from wallets where user_id = $1
        order by currency
        "#,
            user_id,
        ))
        .await
}

/// The user's newest entries first, up to `limit`.
pub async fn entries_of_user(
    pool: &PgPool,
    user_id: &str,
    limit: i64,
) -> Result<Vec<EntryRow>, sqlx::Error> {
    db::read_only(pool)
        .all(sqlx::query_as!(
            EntryRow,
            r#"
        select id, user_id, currency, amount_minor, kind, provider, source_ref, event_id,
               to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as "created_at!"
        from wallet_entries where user_id = $1
        order by id desc
        limit $2
        "#,
            user_id,
            limit,
        ))
        .await
}

/// The entries an event wrote.
pub async fn entries_of_event(
    pool: &PgPool,
    provider: &str,
    event_id: &str,
) -> Result<Vec<EntryRow>, sqlx::Error> {
    db::read_only(pool)
        .all(sqlx::query_as!(
            EntryRow,
            r#"
        select id, user_id, currency, amount_minor, kind, provider, source_ref, event_id,
               to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as "created_at!"
        from wallet_entries where event_id = $2 and provider = $1
        order by id
        "#,
            provider,
            event_id,
        ))
        .await
}
