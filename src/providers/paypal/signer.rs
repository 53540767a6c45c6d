//! PayPal's signing certificate, checked: an RSA key, PayPal's signer
//! named in its subject or SAN, valid now.

use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use super::cert_url::Env;
use crate::providers::SignatureError;

/// A signing certificate that passed its checks: its RSA key and validity.
#[derive(Debug)]
pub struct Cert {
    /// The DER `RSAPublicKey` of its subject.
    rsa_public_key: Vec<u8>,
    not_before: i64,
    not_after: i64,
}

impl Cert {
    /// Whether `signature` is this key's RSA PKCS#1 v1.5 SHA-256 signature
    /// of `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            &self.rsa_public_key,
        )
        .verify(message, signature)
        .is_ok()
    }

    pub fn valid_at(&self, now: i64) -> bool {
        (self.not_before..=self.not_after).contains(&now)
    }
}

/// Reads the leaf `der` of `env`'s signer: an RSA key, the signer's name in
/// its subject's common name or its SAN, and valid at `now`.
pub(super) fn checked(der: &[u8], env: Env, now: i64) -> Result<Cert, SignatureError> {
    let invalid = SignatureError::InvalidCertificate;
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|_| invalid("not an X.509 certificate"))?;
    // The name in the SAN; in the subject's common name only when there is
    // no SAN (RFC 6125). Exactly the name: no wildcard stands for it.
    let name = env.signer_name();
    let names = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .any(|n| matches!(n, GeneralName::DNSName(dns) if dns.eq_ignore_ascii_case(name))),
        Ok(None) => cert
            .subject()
            .iter_common_name()
            .any(|cn| cn.as_str().is_ok_and(|cn| cn.eq_ignore_ascii_case(name))),
        Err(_) => false,
    };
    if !names {
        return Err(invalid("the certificate does not name PayPal's signer"));
    }
    let spki = cert.public_key();
    if !matches!(
        spki.parsed(),
        Ok(x509_parser::public_key::PublicKey::RSA(_))
    ) {
        return Err(invalid("the certificate's key is not RSA"));
    }
    let checked = Cert {
        rsa_public_key: spki.subject_public_key.data.to_vec(),
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
    };
    if !checked.valid_at(now) {
        return Err(invalid("the certificate is not valid now"));
    }
    Ok(checked)
}
