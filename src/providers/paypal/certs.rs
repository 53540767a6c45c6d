//! PayPal's signing certificates: the only URLs a delivery's
//! `PAYPAL-CERT-URL` may name ([`CertRef::parse`], checked before anything
//! is fetched), and the certificates behind them ([`Store`]): kept in
//! memory, read from the certificate directory (an operator's pin, held to
//! the name and validity checks), else fetched from PayPal with a short
//! timeout, chained to a trusted root, and written to the directory.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, TrustAnchor, UnixTime};

pub use super::cert_url::{CertRef, Env};
pub use super::signer::Cert;
use super::signer::checked;
use crate::providers::SignatureError;

/// Most certificates kept in memory: PayPal rotates them rarely, and a
/// flood of made-up ids must not grow the process.
const MAX_CACHED: usize = 64;

/// How long a certificate that could not be had is not asked for again:
/// made-up ids then cost PayPal one request per this long each, and a
/// storm of copies one request in all.
const RETRY_FETCH_AFTER: Duration = Duration::from_secs(30);

/// Largest certificate file read or fetched (a leaf and its chain).
const MAX_PEM_BYTES: usize = 64 * 1024;

/// The root and intermediate PayPal's signing certificates are issued
/// under: DigiCert High Assurance EV Root CA (which Mozilla's list, and so
/// `webpki-roots`, no longer carries) and DigiCert SHA2 Extended Validation
/// Server CA (valid to 2028-10-22; PayPal's certificate URLs serve the leaf
/// alone). Trusted for PayPal's signer only, as PayPal's own SDKs ship them.
const PAYPAL_ISSUERS: &[u8] = include_bytes!("digicert.pem");

/// How certificates are kept and fetched.
#[derive(Debug, Clone)]
pub struct CertSettings {
    /// Where certificates are kept as `<id>.pem`: one found there is used
    /// without fetching, and fetched ones are written there. None: memory only.
    pub dir: Option<PathBuf>,
    /// How long one fetch may take.
    pub timeout: Duration,
    /// For tests: connect to this address for PayPal's hosts instead of
    /// resolving them. Never read from the environment.
    pub connect_to: Option<SocketAddr>,
    /// Roots a fetched chain must lead to; empty: Mozilla's (as shipped in
    /// `webpki-roots`) and PayPal's issuing root ([`PAYPAL_ISSUERS`]).
    pub roots: Vec<CertificateDer<'static>>,
    /// For tests: the roots the fetch's TLS connection trusts; empty: the
    /// built-in ones. Never read from the environment.
    pub tls_roots: Vec<CertificateDer<'static>>,
}

impl Default for CertSettings {
    fn default() -> Self {
        CertSettings {
            dir: None,
            timeout: Duration::from_secs(5),
            connect_to: None,
            roots: Vec::new(),
            tls_roots: Vec::new(),
        }
    }
}

/// The certificates this process trusts, by URL.
#[derive(Debug)]
pub struct Store {
    dir: Option<PathBuf>,
    client: reqwest::Client,
    roots: Vec<TrustAnchor<'static>>,
    /// Issuers a fetched leaf may chain through besides those sent with it.
    intermediates: Vec<CertificateDer<'static>>,
    memory: RwLock<HashMap<CertRef, Arc<Cert>>>,
    /// One fetch at a time: copies of a delivery share one, and made-up
    /// ids cost PayPal one request each, never many at once.
    fetching: tokio::sync::Mutex<()>,
    /// Certificates that could not be had lately, with why, by when they
    /// were asked for (at most [`MAX_CACHED`]).
    failed: std::sync::Mutex<HashMap<CertRef, (std::time::Instant, SignatureError)>>,
}

impl Store {
    pub fn new(settings: &CertSettings) -> anyhow::Result<Self> {
        if let Some(dir) = &settings.dir {
            std::fs::create_dir_all(dir).map_err(|e| {
                anyhow::anyhow!(
                    "WEBHOOKD_PAYPAL_CERT_DIR {} cannot be used: {e}",
                    dir.display()
                )
            })?;
        }
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
        let anchor = |root: &CertificateDer<'_>| {
            webpki::anchor_from_trusted_cert(root)
                .map(|anchor| anchor.to_owned())
                .map_err(|e| anyhow::anyhow!("a PayPal root is not a CA certificate: {e}"))
        };
        let roots = if settings.roots.is_empty() {
            let mut roots = webpki_roots::TLS_SERVER_ROOTS.to_vec();
            roots.push(anchor(issuing_root)?);
            roots
        } else {
            settings
                .roots
                .iter()
                .map(anchor)
                .collect::<anyhow::Result<_>>()?
        };
        Ok(Store {
            dir: settings.dir.clone(),
            client: client.build()?,
            roots,
            intermediates: intermediates.to_vec(),
            memory: RwLock::default(),
            fetching: tokio::sync::Mutex::new(()),
            failed: std::sync::Mutex::default(),
        })
    }

    /// The certificate `cert` names, if it is loaded.
    pub fn cached(&self, cert: &CertRef) -> Option<Arc<Cert>> {
        let memory = self
            .memory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        memory.get(cert).cloned()
    }

    /// Loads the certificate `cert` names, valid at `now`: from memory, the
    /// directory, or PayPal. A fetch that fails is
    /// [`SignatureError::KeyUnavailable`] (PayPal retries); a certificate
    /// that fails its checks is [`SignatureError::InvalidCertificate`].
    pub async fn load(&self, cert: &CertRef, now: i64) -> Result<Arc<Cert>, SignatureError> {
        if let Some(found) = self.cached(cert) {
            return Ok(found);
        }
        if let Some(pem) = self.pinned(cert).await? {
            let leaf = leaf_and_chain(&pem)?.0;
            return Ok(self.keep(cert, checked(&leaf, cert.env, now)?));
        }
        let _turn = self.fetching.lock().await;
        if let Some(found) = self.cached(cert) {
            return Ok(found);
        }
        if let Some(refusal) = self.failed_lately(cert) {
            return Err(refusal);
        }
        match self.fetch_checked(cert, now).await {
            Ok(found) => Ok(self.keep(cert, found)),
            Err(refusal) => {
                let mut failed = self
                    .failed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if failed.len() >= MAX_CACHED {
                    failed.clear();
                }
                failed.insert(cert.clone(), (std::time::Instant::now(), refusal.clone()));
                Err(refusal)
            }
        }
    }

    /// Why `cert` could not be had, if that was less than
    /// [`RETRY_FETCH_AFTER`] ago.
    fn failed_lately(&self, cert: &CertRef) -> Option<SignatureError> {
        let failed = self
            .failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (at, refusal) = failed.get(cert)?;
        (at.elapsed() < RETRY_FETCH_AFTER).then(|| refusal.clone())
    }

    async fn fetch_checked(&self, cert: &CertRef, now: i64) -> Result<Cert, SignatureError> {
        let pem = self.fetch(cert).await?;
        let (leaf, chain) = leaf_and_chain(&pem)?;
        self.chains(&leaf, &chain, cert.env, now)?;
        let found = checked(&leaf, cert.env, now)?;
        self.write(cert, &pem).await;
        Ok(found)
    }

    fn keep(&self, cert: &CertRef, found: Cert) -> Arc<Cert> {
        let found = Arc::new(found);
        let mut memory = self
            .memory
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if memory.len() >= MAX_CACHED {
            memory.clear();
        }
        memory.insert(cert.clone(), found.clone());
        found
    }

    /// The operator's file for `cert`, if there is one.
    async fn pinned(&self, cert: &CertRef) -> Result<Option<Vec<u8>>, SignatureError> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        match tokio::fs::read(dir.join(format!("{}.pem", cert.id))).await {
            Ok(pem) if pem.len() <= MAX_PEM_BYTES => Ok(Some(pem)),
            Ok(_) => Err(SignatureError::InvalidCertificate(
                "the certificate file is too large",
            )),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => {
                tracing::warn!(%error, cert = %cert.id, "cannot read a pinned PayPal certificate");
                Err(SignatureError::KeyUnavailable)
            }
        }
    }

    async fn fetch(&self, cert: &CertRef) -> Result<Vec<u8>, SignatureError> {
        let unavailable = |what: &str, error: &dyn std::fmt::Display| {
            tracing::warn!(cert = %cert.id, %error, "cannot fetch PayPal's certificate: {what}");
            SignatureError::KeyUnavailable
        };
        let response = self
            .client
            .get(cert.url())
            .send()
            .await
            .map_err(|e| unavailable("request failed", &e))?;
        if !response.status().is_success() {
            return Err(unavailable("answered", &response.status()));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_PEM_BYTES as u64)
        {
            return Err(SignatureError::InvalidCertificate(
                "the certificate is too large",
            ));
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| unavailable("body failed", &e))?;
        if body.len() > MAX_PEM_BYTES {
            return Err(SignatureError::InvalidCertificate(
                "the certificate is too large",
            ));
        }
        Ok(body.to_vec())
    }

    /// A fetched leaf must chain, through the certificates sent with it, to
    /// a trusted root, for TLS server use, and carry the signer's name.
    fn chains(
        &self,
        leaf: &CertificateDer<'_>,
        chain: &[CertificateDer<'_>],
        env: Env,
        now: i64,
    ) -> Result<(), SignatureError> {
        let invalid = SignatureError::InvalidCertificate;
        let end_entity = webpki::EndEntityCert::try_from(leaf)
            .map_err(|_| invalid("not an X.509 certificate"))?;
        let time = UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(now).unwrap_or(0)));
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

    /// Keeps a fetched certificate for the next start (best effort: a
    /// directory that cannot be written only costs a fetch).
    async fn write(&self, cert: &CertRef, pem: &[u8]) {
        let Some(dir) = &self.dir else {
            return;
        };
        let path = dir.join(format!("{}.pem", cert.id));
        let partial = dir.join(format!(".{}.pem.partial", cert.id));
        let written = async {
            tokio::fs::write(&partial, pem).await?;
            tokio::fs::rename(&partial, &path).await
        };
        if let Err(error) = written.await {
            tracing::warn!(%error, cert = %cert.id, "cannot keep PayPal's certificate");
        }
    }
}

/// The first certificate of `pem` and the ones after it.
fn leaf_and_chain(
    pem: &[u8],
) -> Result<(CertificateDer<'static>, Vec<CertificateDer<'static>>), SignatureError> {
    let mut certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| SignatureError::InvalidCertificate("not a PEM certificate"))?;
    if certs.is_empty() {
        return Err(SignatureError::InvalidCertificate("not a PEM certificate"));
    }
    let leaf = certs.remove(0);
    Ok((leaf, certs))
}
