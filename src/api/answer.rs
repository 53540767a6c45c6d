//! What a provider's answer holds: its body (bounded), how long it asks us
//! to wait, and its own error message.

use std::time::Duration;

use reqwest::header::HeaderValue;

use super::LONGEST_BACKOFF;
use crate::telemetry;

/// Largest body read from a provider: a page of 100 objects is far smaller.
pub const MOST_BODY_BYTES: usize = 32 * 1024 * 1024;

pub(super) enum Unread {
    TooLarge,
    Failed(reqwest::Error),
}

/// The body, read chunk by chunk, refused past `most` bytes.
pub(super) async fn read_bounded(
    mut response: reqwest::Response,
    most: usize,
) -> Result<Vec<u8>, Unread> {
    if response
        .content_length()
        .is_some_and(|length| length > most as u64)
    {
        return Err(Unread::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Unread::Failed)? {
        if body.len() + chunk.len() > most {
            return Err(Unread::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A `Retry-After` in seconds, bounded (a provider cannot park a sweep).
pub(super) fn retry_after(value: Option<&HeaderValue>) -> Option<Duration> {
    let seconds: u64 = value?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds.min(LONGEST_BACKOFF.as_secs())))
}

/// The provider's own error message, bounded: `{"error": {"message"}}`
/// (Stripe), `{"error": {"description"}}` (Razorpay), `{"message",
/// "details": [{"field", "issue"}]}` (PayPal's REST APIs) or
/// `{"error_description"}` (an OAuth token endpoint).
pub(super) fn error_message(body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let text = |pointer| value.pointer(pointer).and_then(serde_json::Value::as_str);
    let message = text("/error/message")
        .or_else(|| text("/error/description"))
        .or_else(|| text("/message"))
        .or_else(|| text("/error_description"))
        .unwrap_or("no error message");
    let message = match (text("/details/0/field"), text("/details/0/issue")) {
        (Some(field), Some(issue)) => format!("{message} ({field}: {issue})"),
        _ => message.to_owned(),
    };
    telemetry::bounded(&message).into_owned()
}
