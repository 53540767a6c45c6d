//! Shopify: `X-Shopify-Hmac-Sha256` is the base64 HMAC-SHA256 of the raw body
//! under the app's client secret (hex is refused). The id is
//! `X-Shopify-Event-Id`, else `X-Shopify-Webhook-Id`; the type
//! `X-Shopify-Topic`. Shopify signs no timestamp.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;

use super::{
    BodySignature, Keys, SignatureError, Verify, base64_32, header, identifier_header, source_event,
};
use super::{VerifiedEvent, verified};
use crate::secrets::Secrets;

pub const SIGNATURE_HEADER: &str = "x-shopify-hmac-sha256";

const SIGNATURE: BodySignature<Vec<u8>> = BodySignature {
    name: SIGNATURE_HEADER,
    shown: "X-Shopify-Hmac-Sha256",
    decode: base64_32,
    malformed: "not the base64 of a SHA-256 HMAC",
};

#[derive(Debug)]
pub struct ShopifyVerifier {
    name: Arc<str>,
    keys: Keys,
}

impl ShopifyVerifier {
    pub fn new(name: Arc<str>, secrets: &Secrets) -> Self {
        ShopifyVerifier {
            name,
            keys: Keys::from_secrets(secrets),
        }
    }
}

impl Verify for ShopifyVerifier {
    fn verify(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        _now: i64,
    ) -> Result<VerifiedEvent, SignatureError> {
        let secret = SIGNATURE.verify(&self.keys, headers, body)?;
        let id_header = match header(headers, "x-shopify-event-id")? {
            Some(_) => "x-shopify-event-id",
            None => "x-shopify-webhook-id",
        };
        let event_id = identifier_header(
            headers,
            id_header,
            "no usable X-Shopify-Event-Id or X-Shopify-Webhook-Id",
        )?;
        let event_type =
            identifier_header(headers, "x-shopify-topic", "no usable X-Shopify-Topic")?;
        source_event(&self.name, event_id, Some(event_type), None, body)
            .map(|event| verified(event, secret))
    }
}
