//! Fetching a certificate from PayPal, and the chain a fetched one must
//! have: to a DigiCert root, for TLS server use, naming PayPal's signer.

use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, TrustAnchor, UnixTime};

use super::{CertRef, CertSettings, Env, MAX_PEM_BYTES};
use crate::providers::SignatureError;

/// The issuers of PayPal's signing certificates, which PayPal's certificate
/// URLs leave out (they serve the leaf alone): DigiCert High Assurance EV
/// Root CA, the root of every PayPal signing certificate to date, which
/// Mozilla's list (and so `webpki-roots`) no longer carries, trusted here
/// for PayPal's signer only, as PayPal's own SDKs ship it; then the
/// intermediates a leaf may chain through: DigiCert SHA2 Extended
/// Validation Server CA (to 2028-10-22, under that root), and, under DigiCert
/// Global Root G2 (in Mozilla's list), DigiCert EV RSA CA G2 (to
/// 2030-07-02) and DigiCert Global G2 TLS RSA SHA256 2020 CA1 (to
/// 2031-03-29), where DigiCert said PayPal's certificates move.
const PAYPAL_ISSUERS: &[u8] = include_bytes!("digicert.pem");

/// What fetching and chaining need, built once.
#[derive(Debug)]
pub(super) struct Fetcher {
    client: reqwest::Client,
    roots: Vec<TrustAnchor<'static>>,
    /// Issuers a fetched leaf may chain through besides those sent with it.
    intermediates: Vec<CertificateDer<'static>>,
}

impl Fetcher {
    pub(super) fn new(settings: &CertSettings) -> anyhow::Result<Self> {
        let mut client = reqwest::Client::builder()
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout);
        if let Some(address) = settings.connect_to {
            for env in [Env::Live, Env::Sandbox] {
                client = client.resolve(env.host(), address);
            }
        }
        if !settings.tls_roots.is_empty() {
            client = client.tls_built_in_root_certs(false);
            for root in &settings.tls_roots {
                client = client.add_root_certificate(reqwest::Certificate::from_der(root)?);
            }
        }
        let issuers =
            CertificateDer::pem_slice_iter(PAYPAL_ISSUERS).collect::<Result<Vec<_>, _>>()?;
        let (issuing_root, intermediates) = issuers.split_first().expect("two certificates");
        let roots = if settings.roots.is_empty() {
            // DigiCert issues PayPal's signer: no other authority is trusted for it.
            let mut roots: Vec<TrustAnchor<'static>> = webpki_roots::TLS_SERVER_ROOTS
                .iter()
                .filter(|root| contains(&root.subject, b"DigiCert"))
                .cloned()
                .collect();
            roots.push(anchor(issuing_root)?);
            roots
        } else {
            settings
                .roots
                .iter()
                .map(anchor)
                .collect::<anyhow::Result<_>>()?
        };
        Ok(Fetcher {
            client: client.build()?,
            roots,
            intermediates: intermediates.to_vec(),
        })
    }

    /// The PEM at `cert`'s URL. A certificate PayPal says it does not have
    /// is refused (400); any other failure is transient (503).
    pub(super) async fn fetch(&self, cert: &CertRef) -> Result<Vec<u8>, SignatureError> {
        let unavailable = |what: &str, error: &dyn std::fmt::Display| {
            tracing::warn!(cert = %cert.id, %error, "cannot fetch PayPal's certificate: {what}");
            SignatureError::KeyUnavailable
        };
        let mut response = self
            .client
            .get(cert.url())
            .send()
            .await
            .map_err(|e| unavailable("request failed", &e))?;
        let status = response.status();
        if matches!(status.as_u16(), 404 | 410) {
            return Err(SignatureError::InvalidCertificate(
                "PayPal has no such certificate",
            ));
        }
        if !status.is_success() {
            return Err(unavailable("answered", &status));
        }
        let too_large = SignatureError::InvalidCertificate("the certificate is too large");
        let mut pem = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unavailable("body failed", &e))?
        {
            if pem.len() + chunk.len() > MAX_PEM_BYTES {
                return Err(too_large);
            }
            pem.extend_from_slice(&chunk);
        }
        Ok(pem)
    }

    /// A fetched leaf must chain, through the certificates sent with it and
    /// the shipped issuers, to a trusted root, for TLS server use, and name
    /// the signer in its SAN.
    pub(super) fn chains(
        &self,
        leaf: &CertificateDer<'_>,
        chain: &[CertificateDer<'_>],
        env: Env,
        now: i64,
    ) -> Result<(), SignatureError> {
        let invalid = SignatureError::InvalidCertificate;
        let end_entity = webpki::EndEntityCert::try_from(leaf)
            .map_err(|_| invalid("not an X.509 certificate"))?;
        let now = u64::try_from(now).map_err(|_| invalid("the certificate is not valid now"))?;
        let time = UnixTime::since_unix_epoch(Duration::from_secs(now));
        let chain: Vec<CertificateDer<'_>> =
            chain.iter().chain(&self.intermediates).cloned().collect();
        end_entity
            .verify_for_usage(
                webpki::ALL_VERIFICATION_ALGS,
                &self.roots,
                &chain,
                time,
                webpki::KeyUsage::server_auth(),
                None,
                None,
            )
            .map_err(|_| invalid("the certificate does not chain to a trusted root"))?;
        let name = ServerName::try_from(env.signer_name()).map_err(|_| invalid("signer name"))?;
        end_entity
            .verify_is_valid_for_subject_name(&name)
            .map_err(|_| invalid("the certificate does not name PayPal's signer"))
    }
}

fn anchor(root: &CertificateDer<'_>) -> anyhow::Result<TrustAnchor<'static>> {
    webpki::anchor_from_trusted_cert(root)
        .map(|anchor| anchor.to_owned())
        .map_err(|e| anyhow::anyhow!("a PayPal root is not a CA certificate: {e}"))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}
