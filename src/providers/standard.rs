//! Standard Webhooks (https://www.standardwebhooks.com): `webhook-id`,
//! `webhook-timestamp`, and `webhook-signature`, a space-separated list of
//! `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`. The key is the
//! base64 part of the `whsec_...` secret. Other versions (`v1a`) are ignored,
//! so a list without `v1` is refused. The timestamp must be within the
//! tolerance in both directions.

use std::sync::Arc;

use anyhow::Context;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::HeaderMap;
use secrecy::ExposeSecret;

use super::{
    Keys, SignatureError, VerifiedEvent, Verify, base64_32, check_tolerance, is_identifier,
    parse_timestamp, required_header, source_event,
};
use crate::config::Secrets;

#[derive(Debug)]
pub struct StandardVerifier {
    name: Arc<str>,
    keys: Keys,
    tolerance_secs: u64,
}

impl StandardVerifier {
    /// Fails when a secret is not `whsec_` + base64.
    pub fn new(name: Arc<str>, secrets: &Secrets, tolerance_secs: u64) -> anyhow::Result<Self> {
        let keys = secrets
            .iter()
            .map(|secret| decode_secret(secret.expose_secret()))
            .collect::<anyhow::Result<Vec<_>>>()
            .with_context(|| format!("the secret of source {name}"))?;
        Ok(StandardVerifier {
            name,
            keys: Keys::new(keys.iter().map(Vec::as_slice)),
            tolerance_secs,
        })
    }
}

/// The key inside a `whsec_<base64>` secret (the prefix is optional).
pub fn decode_secret(secret: &str) -> anyhow::Result<Vec<u8>> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    STANDARD
        .decode(encoded)
        .ok()
        .filter(|key| !key.is_empty())
        .context("a Standard Webhooks secret is `whsec_` followed by base64")
}

impl Verify for StandardVerifier {
    fn verify(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        now: i64,
    ) -> Result<VerifiedEvent, SignatureError> {
        let id = required_header(headers, "webhook-id", "webhook-id")?;
        let timestamp = required_header(headers, "webhook-timestamp", "webhook-timestamp")?;
        let signatures = required_header(headers, "webhook-signature", "webhook-signature")?;
        let signed_at = parse_timestamp(timestamp).ok_or(SignatureError::MalformedHeader(
            "webhook-timestamp is not a Unix timestamp",
        ))?;
        let candidates: Vec<Vec<u8>> = signatures
            .split(' ')
            .filter_map(|item| item.strip_prefix("v1,"))
            .filter_map(base64_32)
            .collect();
        if candidates.is_empty() {
            return Err(SignatureError::NoSupportedSignature);
        }
        if !self.keys.any_matches(
            &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
            &candidates,
        ) {
            return Err(SignatureError::Mismatch);
        }
        check_tolerance(now, signed_at, self.tolerance_secs)?;
        if !is_identifier(id) {
            return Err(SignatureError::InvalidPayload("no usable webhook-id"));
        }
        source_event(&self.name, id.to_owned(), None, Some(signed_at), body)
    }
}

/// Signs as Standard Webhooks does: the `webhook-signature` value.
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> anyhow::Result<String> {
    use hmac::Mac;
    let mut mac =
        super::HmacSha256::new_from_slice(&decode_secret(secret)?).expect("any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    Ok(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}
