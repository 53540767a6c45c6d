//! HMAC keys prepared once at start-up, compared in constant time.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::SignatureError;
use crate::secrets::Secrets;

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// HMAC keys prepared once at start-up, one per secret.
pub(crate) struct Keys(Vec<HmacSha256>);

impl Keys {
    pub(crate) fn new<'a>(secrets: impl IntoIterator<Item = &'a [u8]>) -> Self {
        Keys(
            secrets
                .into_iter()
                .map(|key| HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length"))
                .collect(),
        )
    }

    /// The raw bytes of each secret are the key (Stripe, Razorpay, GitHub, Shopify).
    pub(crate) fn from_secrets(secrets: &Secrets) -> Self {
        use secrecy::ExposeSecret;
        Keys::new(secrets.iter().map(|s| s.expose_secret().as_bytes()))
    }

    /// Ok when the HMAC of `parts`, under any key, equals any candidate;
    /// [`SignatureError::Mismatch`] otherwise.
    pub(crate) fn verify<C: AsRef<[u8]>>(
        &self,
        parts: &[&[u8]],
        candidates: &[C],
    ) -> Result<(), SignatureError> {
        if self.any_matches(parts, candidates) {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }

    /// Whether the HMAC of `parts`, under any key, equals any candidate.
    /// Every comparison runs, in constant time, whatever matched.
    fn any_matches<C: AsRef<[u8]>>(&self, parts: &[&[u8]], candidates: &[C]) -> bool {
        let mut matched = subtle::Choice::from(0);
        for key in &self.0 {
            let mut mac = key.clone();
            for part in parts {
                mac.update(part);
            }
            let expected = mac.finalize().into_bytes();
            for candidate in candidates {
                matched |= expected.as_slice().ct_eq(candidate.as_ref());
            }
        }
        matched.into()
    }
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Keys([{} redacted])", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_any_candidate_under_any_secret() {
        let keys = Keys::new([b"old".as_slice(), b"new".as_slice()]);
        let mut mac = HmacSha256::new_from_slice(b"new").unwrap();
        mac.update(b"a.b");
        let good = mac.finalize().into_bytes().to_vec();
        assert!(keys.any_matches(&[b"a", b".", b"b"], &[vec![0; 32], good.clone()]));
        assert!(!keys.any_matches(&[b"a.c"], &[good]));
        assert!(!keys.any_matches::<Vec<u8>>(&[b"a.b"], &[]));
    }
}
