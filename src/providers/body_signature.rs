//! The simplest scheme's check: one header carrying the HMAC-SHA256 of the
//! raw body, nothing else signed (Razorpay, GitHub, Shopify). Each says how
//! its header is named and encoded.

use http::HeaderMap;

use super::{Keys, SignatureError, required_header};

/// A header that carries the HMAC-SHA256 of the raw body.
pub(crate) struct BodySignature<S> {
    pub name: &'static str,
    /// The header's name as a refusal shows it.
    pub shown: &'static str,
    /// The signature in the header's value, if it is well-formed.
    pub decode: fn(&str) -> Option<S>,
    /// What a refusal of a malformed value says.
    pub malformed: &'static str,
}

impl<S: AsRef<[u8]>> BodySignature<S> {
    /// The position of the secret that signed `body` (see [`Keys::verify`]).
    pub(crate) fn verify(
        &self,
        keys: &Keys,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<usize, SignatureError> {
        let value = required_header(headers, self.name, self.shown)?;
        let signature =
            (self.decode)(value).ok_or(SignatureError::MalformedHeader(self.malformed))?;
        keys.verify(&[body], &[signature])
    }
}
