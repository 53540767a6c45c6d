//! Where a delivery's `PAYPAL-CERT-URL` may point: PayPal's two exact
//! certificate prefixes and a well-formed id, checked before any fetch.

use crate::providers::SignatureError;

/// Live or sandbox: where the certificate URL points, and the name its
/// certificate must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Env {
    Live,
    Sandbox,
}

impl Env {
    fn url_prefix(self) -> &'static str {
        match self {
            Env::Live => "https://api.paypal.com/v1/notifications/certs/",
            Env::Sandbox => "https://api.sandbox.paypal.com/v1/notifications/certs/",
        }
    }

    /// The host the certificate is fetched from.
    pub fn host(self) -> &'static str {
        match self {
            Env::Live => "api.paypal.com",
            Env::Sandbox => "api.sandbox.paypal.com",
        }
    }

    /// The name the certificate must carry in its subject or SAN.
    pub fn signer_name(self) -> &'static str {
        match self {
            Env::Live => "messageverificationcerts.paypal.com",
            Env::Sandbox => "messageverificationcerts.sandbox.paypal.com",
        }
    }
}

/// A certificate URL PayPal may send: one of the two exact prefixes and an
/// id like `CERT-360caa42-fca2a594-1a5f47cb`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CertRef {
    pub env: Env,
    pub id: String,
}

impl CertRef {
    /// Anything else (another host, a lookalike, `http`, a port, another
    /// path, a query, credentials) is refused here, before any fetch.
    pub fn parse(url: &str) -> Result<CertRef, SignatureError> {
        let refused = SignatureError::MalformedHeader(
            "PAYPAL-CERT-URL is not one of PayPal's certificate URLs",
        );
        let (env, id) = [Env::Live, Env::Sandbox]
            .into_iter()
            .find_map(|env| Some((env, url.strip_prefix(env.url_prefix())?)))
            .ok_or(refused.clone())?;
        let well_formed = id.len() <= 64
            && id.strip_prefix("CERT-").is_some_and(|rest| {
                !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !well_formed {
            return Err(refused);
        }
        Ok(CertRef {
            env,
            id: id.to_owned(),
        })
    }

    pub fn url(&self) -> String {
        format!("{}{}", self.env.url_prefix(), self.id)
    }
}
