//! GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`; the
//! older SHA-1 `X-Hub-Signature` alone is refused. The id is
//! `X-GitHub-Delivery`, the type `X-GitHub-Event`. GitHub signs no timestamp.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;

use super::{
    BodySignature, Keys, SignatureError, Verify, identifier_header, lower_hex_32, source_event,
};
use super::{VerifiedEvent, verified};
use crate::secrets::Secrets;

pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

const SIGNATURE: BodySignature<[u8; 32]> = BodySignature {
    name: SIGNATURE_HEADER,
    shown: "X-Hub-Signature-256",
    decode: |value| value.strip_prefix("sha256=").and_then(lower_hex_32),
    malformed: "expected sha256=<64 lower-case hex digits>",
};

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
        let secret = SIGNATURE.verify(&self.keys, headers, body)?;
        let event_id =
            identifier_header(headers, "x-github-delivery", "no usable X-GitHub-Delivery")?;
        let event_type = identifier_header(headers, "x-github-event", "no usable X-GitHub-Event")?;
        source_event(&self.name, event_id, Some(event_type), None, body)
            .map(|event| verified(event, secret))
    }
}
