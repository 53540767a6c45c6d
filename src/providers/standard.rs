//! Standard Webhooks (https://www.standardwebhooks.com): `webhook-id`,
//! `webhook-timestamp`, and `webhook-signature` (or their `svix-` twins), a space-separated list of
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
    Keys, SignatureError, Verify, base64_32, check_tolerance, header, is_identifier,
    parse_timestamp, required_header, source_event,
};
use super::{VerifiedEvent, verified};
use crate::secrets::Secrets;

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
        let id = standard_header(headers, "webhook-id", "svix-id")?;
        let timestamp = standard_header(headers, "webhook-timestamp", "svix-timestamp")?;
        let signatures = standard_header(headers, "webhook-signature", "svix-signature")?;
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
        let secret = self.keys.verify(
            &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
            &candidates,
        )?;
        check_tolerance(now, signed_at, self.tolerance_secs)?;
        if !is_identifier(id) {
            return Err(SignatureError::InvalidPayload("no usable webhook-id"));
        }
        source_event(&self.name, id.to_owned(), None, Some(signed_at), body)
            .map(|event| verified(event, secret))
    }
}

/// A Standard Webhooks header, or its `svix-` twin (what Svix-hosted senders
/// send; the official libraries accept both).
fn standard_header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
    svix: &'static str,
) -> Result<&'a str, SignatureError> {
    match header(headers, name)? {
        Some(value) => Ok(value),
        None => required_header(headers, svix, name),
    }
}

/// Signs as Standard Webhooks does, with a key decoded once.
#[derive(Clone)]
pub struct Signer {
    key: super::HmacSha256,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer([redacted])")
    }
}

impl Signer {
    pub fn new(secret: &str) -> anyhow::Result<Self> {
        use hmac::Mac;
        let key = decode_secret(secret)?;
        Ok(Signer {
            key: super::HmacSha256::new_from_slice(&key).expect("any key length"),
        })
    }

    /// The `webhook-signature` value for message `id` sent at `timestamp`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        use hmac::Mac;
        let mut mac = self.key.clone();
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// Signs as Standard Webhooks does: the `webhook-signature` value.
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> anyhow::Result<String> {
    Ok(Signer::new(secret)?.sign(id, timestamp, body))
}
