//! Fresh state on ties (`WEBHOOKD_STRIPE_REFRESH_ON_TIE=subscriptions`):
//! Stripe stamps events to the second, so two changes of one subscription
//! in one second tie, and the stored state cannot tell which is newer
//! (the rule falls back to the later arrival). A subscription event whose
//! `created` equals the stored state's time is given the subscription as
//! `GET /v1/subscriptions/{id}` serves it now, and applies that, still as
//! of its own time: the guard that state never moves backwards is the
//! same. A refresh that fails leaves the event as delivered, to the usual
//! rule, and its detail says why.
//!
//! The stored time is read before the transaction: a tie that only arises
//! while this event waits for its lock (another event of the same second
//! committed meanwhile) is judged by the usual rule.

use reqwest::header::HeaderValue;
use serde_json::Value;
use sqlx::PgPool;

use super::Fetcher;
use crate::effects::stripe::refreshable_subscription;
use crate::providers::Event;
use crate::subscriptions;

/// The subscription of `event` as Stripe's API serves it now, or why it
/// could not be had; `None` when nothing is to be refreshed (refresh off,
/// no subscription event, no tie).
pub(super) async fn refresh(
    fetcher: &Fetcher,
    pool: &PgPool,
    event: &Event,
) -> Option<Result<Value, String>> {
    if !fetcher.refresh_subscriptions {
        return None;
    }
    let id = refreshable_subscription(event)?;
    let created = event.created()?;
    let stored = match subscriptions::event_time(pool, event.provider(), id).await {
        Ok(stored) => stored?,
        Err(error) => return Some(Err(format!("the stored state could not be read: {error}"))),
    };
    if stored != created {
        return None;
    }
    let mut headers: Vec<(&'static str, HeaderValue)> = Vec::new();
    if let Some(account) = event.account() {
        match HeaderValue::from_str(account) {
            Ok(account) => headers.push(("stripe-account", account)),
            Err(_) => return Some(Err("its account is not a header value".to_owned())),
        }
    }
    let path = format!("/v1/subscriptions/{id}");
    match fetcher.object(&path, id, &headers).await {
        Ok(fetched) => Some(fetched),
        Err(super::Unavailable(reason)) => Some(Err(format!(
            "the subscription could not be fetched: {reason}"
        ))),
    }
}
