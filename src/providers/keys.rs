//! HMAC keys prepared once at start-up, compared in constant time.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::{ConditionallySelectable, ConstantTimeEq};

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

    /// The position in the secret list of the first key under which the
    /// HMAC of `parts` equals any candidate (which secret of a rotation
    /// signed); [`SignatureError::Mismatch`] when none does.
    pub(crate) fn verify<C: AsRef<[u8]>>(
        &self,
        parts: &[&[u8]],
        candidates: &[C],
    ) -> Result<usize, SignatureError> {
        self.first_match(parts, candidates)
            .ok_or(SignatureError::Mismatch)
    }

    /// The first key under which the HMAC of `parts` equals any candidate.
    /// Every comparison runs, in constant time, whatever matched, and the
    /// position is chosen without a branch on a comparison.
    fn first_match<C: AsRef<[u8]>>(&self, parts: &[&[u8]], candidates: &[C]) -> Option<usize> {
        let mut matched = subtle::Choice::from(0);
        let mut first = 0u64;
        for (index, key) in self.0.iter().enumerate() {
            let mut mac = key.clone();
            for part in parts {
                mac.update(part);
            }
            let expected = mac.finalize().into_bytes();
            let mut this = subtle::Choice::from(0);
            for candidate in candidates {
                this |= expected.as_slice().ct_eq(candidate.as_ref());
            }
            first.conditional_assign(&(index as u64), this & !matched);
            matched |= this;
        }
        bool::from(matched).then_some(first as usize)
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
        assert_eq!(
            keys.first_match(&[b"a", b".", b"b"], &[vec![0; 32], good.clone()]),
            Some(1),
            "the second secret signed"
        );
        assert_eq!(
            keys.first_match(&[b"a.c"], std::slice::from_ref(&good)),
            None
        );
        assert_eq!(keys.first_match::<Vec<u8>>(&[b"a.b"], &[]), None);
        let twice = Keys::new([b"new".as_slice(), b"new".as_slice()]);
        assert_eq!(twice.first_match(&[b"a.b"], &[good]), Some(0), "the first");
    }
}
