//! Reading the recorded events.

use super::Outcome;
use crate::db::{self, Timestamp};
use serde_json::Value;
use sqlx::PgPool;

/// A stored event with everything kept about it.
#[derive(Debug, Clone)]
pub struct Stored {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub outcome: Outcome,
    pub detail: Value,
    pub payload: String,
    pub provider_created_at: Option<String>,
    pub received_at: String,
    pub received_via: String,
    /// The source that received it, when not the one named as its
    /// provider (the `source` column).
    pub source: Option<String>,
    /// See [`Preview::account`].
    pub account: Option<String>,
    /// See [`Preview::api_version`].
    pub api_version: Option<String>,
    /// See [`Preview::erased_at`].
    pub erased_at: Option<String>,
    /// See [`Preview::payload_expired_at`].
    pub payload_expired_at: Option<String>,
}

impl Stored {
    /// The source that received it: the `source` column, else the one
    /// named as its provider.
    pub fn source_name(&self) -> &str {
        self.source.as_deref().unwrap_or(&self.provider)
    }
}

/// The stored event `provider`/`event_id`, whole ([`preview`]'s, of every
/// character).
pub async fn find(
    pool: &PgPool,
    provider: &str,
    event_id: &str,
) -> Result<Option<Stored>, sqlx::Error> {
    let Some(whole) = preview(pool, provider, event_id, i32::MAX).await? else {
        return Ok(None);
    };
    let detail = serde_json::from_str(&whole.detail_head)
        .map_err(|error| sqlx::Error::Decode(Box::new(error)))?;
    Ok(Some(Stored {
        provider: whole.provider,
        event_id: whole.event_id,
        event_type: whole.event_type,
        outcome: whole.outcome,
        detail,
        payload: whole.payload_head,
        provider_created_at: whole.provider_created_at,
        received_at: whole.received_at,
        received_via: whole.received_via,
        source: whole.source,
        account: whole.account,
        api_version: whole.api_version,
        erased_at: whole.erased_at,
        payload_expired_at: whole.payload_expired_at,
    }))
}

/// A stored event as a page shows it: the text of its detail and payload
/// only up to `chars` characters each, beside their whole lengths in bytes,
/// so that showing a large payload reads only what is shown.
#[derive(Debug, Clone)]
pub struct Preview {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub outcome: Outcome,
    pub detail_head: String,
    pub detail_bytes: i32,
    pub payload_head: String,
    pub payload_bytes: i32,
    /// To the second.
    pub provider_created_at: Option<String>,
    /// To the millisecond.
    pub received_at: String,
    pub received_via: String,
    /// See [`Stored::source`].
    pub source: Option<String>,
    /// The connected account whose event it is (Stripe Connect); `None`:
    /// the platform's own, or a scheme without accounts.
    pub account: Option<String>,
    /// The API version its object was rendered in (Stripe's snapshot
    /// events).
    pub api_version: Option<String>,
    /// When its personal data was erased (`webhookd erase`), to the
    /// second; its payload is then a stub.
    pub erased_at: Option<String>,
    /// When its payload was replaced by a stub, past the payload retention
    /// (`WEBHOOKD_PAYLOAD_RETENTION_DAYS`), to the second.
    pub payload_expired_at: Option<String>,
}

impl Preview {
    /// The source that received it: the `source` column, else the one
    /// named as its provider.
    pub fn source_name(&self) -> &str {
        self.source.as_deref().unwrap_or(&self.provider)
    }
}

pub async fn preview(
    pool: &PgPool,
    provider: &str,
    event_id: &str,
    chars: i32,
) -> Result<Option<Preview>, sqlx::Error> {
    let row = db::read_only(pool).optional(sqlx::query!(
        r#"
        select provider, event_id, event_type, outcome as "outcome: Outcome",
               left(detail::text, $3) as "detail_head!", octet_length(detail::text) as "detail_bytes!",
               left(payload::text, $3) as "payload_head!", octet_length(payload::text) as "payload_bytes!",
               provider_created_at as "provider_created_at: Timestamp",
               received_at as "received_at: Timestamp",
               received_via, source, account, api_version,
               erased_at as "erased_at: Timestamp",
               payload_expired_at as "payload_expired_at: Timestamp"
        from processed_events
        where provider = $1 and event_id = $2
        "#,
        provider,
        event_id,
        chars,
    ));
    Ok(row.await?.map(|row| Preview {
        provider: row.provider,
        event_id: row.event_id,
        event_type: row.event_type,
        outcome: row.outcome,
        detail_head: row.detail_head,
        detail_bytes: row.detail_bytes,
        payload_head: row.payload_head,
        payload_bytes: row.payload_bytes,
        provider_created_at: row.provider_created_at.map(|at| at.to_string()),
        received_at: row.received_at.millis(),
        received_via: row.received_via,
        source: row.source,
        account: row.account,
        api_version: row.api_version,
        erased_at: row.erased_at.map(|at| at.to_string()),
        payload_expired_at: row.payload_expired_at.map(|at| at.to_string()),
    }))
}
