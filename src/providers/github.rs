//! GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`; the
//! older SHA-1 `X-Hub-Signature` alone is refused. The id is
//! `X-GitHub-Delivery`, the type `X-GitHub-Event`. GitHub signs no timestamp.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;

use super::{
    Keys, SignatureError, Verify, identifier_header, lower_hex_32, required_header, source_event,
};
use super::{VerifiedEvent, verified};
use crate::secrets::Secrets;

pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

#[derive(Debug)]
pub struct GithubVerifier {
    name: Arc<str>,
    keys: Keys,
}

impl GithubVerifier {
    pub fn new(name: Arc<str>, secrets: &Secrets) -> Self {
        GithubVerifier {
            name,
            keys: Keys::from_secrets(secrets),
        }
    }
}

impl Verify for GithubVerifier {
    fn verify(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        _now: i64,
    ) -> Result<VerifiedEvent, SignatureError> {
        let signature = required_header(headers, SIGNATURE_HEADER, "X-Hub-Signature-256")?;
        let signature = signature
            .strip_prefix("sha256=")
            .and_then(lower_hex_32)
            .ok_or(SignatureError::MalformedHeader(
                "expected sha256=<64 lower-case hex digits>",
            ))?;
        let secret = self.keys.verify(&[body], &[signature])?;
        let event_id =
            identifier_header(headers, "x-github-delivery", "no usable X-GitHub-Delivery")?;
        let event_type = identifier_header(headers, "x-github-event", "no usable X-GitHub-Event")?;
        source_event(&self.name, event_id, Some(event_type), None, body)
            .map(|event| verified(event, secret))
    }
}
