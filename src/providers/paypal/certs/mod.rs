//! PayPal's signing certificates, by URL ([`CertRef`], checked before
//! anything is fetched): kept in memory, read from the certificate
//! directory (an operator's pin, held to the name and validity checks:
//! [`files`]), else fetched from PayPal with a short timeout and chained to
//! a DigiCert root ([`fetch`]), then written to the directory.
//!
//! Fetching is guarded, because anyone can name a made-up id: copies of a
//! delivery share one fetch; at most [`MAX_FETCHES`] run at once and at
//! most [`FETCH_BURST`] start in a burst (one a second after it), past
//! which a delivery is answered 503 at once rather than queued; and an id
//! PayPal said it does not have, or whose certificate failed its checks, is
//! refused for [`REFUSE_FOR`] without asking again. Transient failures are
//! never remembered, so one outage cannot keep a real certificate out.

mod fetch;
mod files;

pub use files::check as check_dir;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

pub use super::cert_url::{CertRef, Env};
pub use super::signer::Cert;
use super::signer::checked;
use crate::providers::SignatureError;

/// Most certificates kept in memory: only real ones get there.
const MAX_CACHED: usize = 64;

/// Most refusals remembered.
const MAX_REFUSED: usize = 1024;

/// How long a definitive refusal stands.
const REFUSE_FOR: Duration = Duration::from_secs(300);

/// Most fetches at once.
const MAX_FETCHES: usize = 2;

/// Fetches that may start at once after a quiet spell; then one a second.
const FETCH_BURST: f64 = 5.0;

/// Largest certificate file read or fetched (a leaf and its chain).
const MAX_PEM_BYTES: usize = 64 * 1024;

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
    /// Roots a fetched chain must lead to; empty: DigiCert's (from
    /// Mozilla's list in `webpki-roots`, and PayPal's issuing root).
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
    fetcher: fetch::Fetcher,
    memory: RwLock<HashMap<CertRef, Arc<Cert>>>,
    /// One lock per certificate being fetched: its copies wait for it.
    inflight: Mutex<HashMap<CertRef, Arc<tokio::sync::Mutex<()>>>>,
    fetches: tokio::sync::Semaphore,
    bucket: Mutex<Bucket>,
    refused: Mutex<HashMap<CertRef, (Instant, SignatureError)>>,
}

impl Store {
    pub fn new(settings: &CertSettings) -> anyhow::Result<Self> {
        if let Some(dir) = &settings.dir {
            files::prepare(dir)?;
        }
        Ok(Store {
            dir: settings.dir.clone(),
            fetcher: fetch::Fetcher::new(settings)?,
            memory: RwLock::default(),
            inflight: Mutex::default(),
            fetches: tokio::sync::Semaphore::new(MAX_FETCHES),
            bucket: Mutex::new(Bucket::full()),
            refused: Mutex::default(),
        })
    }

    /// The certificate `cert` names, if it is loaded.
    pub fn cached(&self, cert: &CertRef) -> Option<Arc<Cert>> {
        let memory = self.memory.read().unwrap_or_else(PoisonError::into_inner);
        memory.get(cert).cloned()
    }

    /// Loads the certificate `cert` names, valid at `now`: from memory, the
    /// directory, or PayPal. A fetch that fails or cannot start now is
    /// [`SignatureError::KeyUnavailable`] (PayPal retries); a certificate
    /// PayPal does not have, or that fails its checks, is
    /// [`SignatureError::InvalidCertificate`].
    pub async fn load(&self, cert: &CertRef, now: i64) -> Result<Arc<Cert>, SignatureError> {
        if let Some(found) = self.cached(cert) {
            return Ok(found);
        }
        // An operator's pin wins over everything but memory.
        if let Some(dir) = &self.dir
            && let Some(pem) = files::read(dir, cert).await?
        {
            let leaf = leaf_and_chain(&pem)?.0;
            return Ok(self.keep(cert, checked(&leaf, cert.env, now)?));
        }
        if let Some(refusal) = self.refused_lately(cert) {
            return Err(refusal);
        }
        let turn = self.turn(cert);
        let _turn = turn.lock().await;
        let fetched = self.fetch_once(cert, now).await;
        lock(&self.inflight).remove(cert);
        fetched
    }

    /// The lock that copies of a delivery naming `cert` share.
    fn turn(&self, cert: &CertRef) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.inflight)
            .entry(cert.clone())
            .or_default()
            .clone()
    }

    /// Fetches `cert` unless a copy did meanwhile, within the limits.
    async fn fetch_once(&self, cert: &CertRef, now: i64) -> Result<Arc<Cert>, SignatureError> {
        if let Some(found) = self.cached(cert) {
            return Ok(found);
        }
        if let Some(refusal) = self.refused_lately(cert) {
            return Err(refusal);
        }
        let Ok(_permit) = self.fetches.try_acquire() else {
            return Err(SignatureError::KeyUnavailable);
        };
        if !lock(&self.bucket).take() {
            return Err(SignatureError::KeyUnavailable);
        }
        match self.fetch_checked(cert, now).await {
            Ok(found) => Ok(self.keep(cert, found)),
            Err(refusal) => {
                if let SignatureError::InvalidCertificate(_) = refusal {
                    self.refuse(cert, refusal.clone());
                }
                Err(refusal)
            }
        }
    }

    async fn fetch_checked(&self, cert: &CertRef, now: i64) -> Result<Cert, SignatureError> {
        let pem = self.fetcher.fetch(cert).await?;
        let (leaf, chain) = leaf_and_chain(&pem)?;
        self.fetcher.chains(&leaf, &chain, cert.env, now)?;
        let found = checked(&leaf, cert.env, now)?;
        if let Some(dir) = &self.dir {
            files::write(dir, cert, pem).await;
        }
        Ok(found)
    }

    fn keep(&self, cert: &CertRef, found: Cert) -> Arc<Cert> {
        let found = Arc::new(found);
        let mut memory = self.memory.write().unwrap_or_else(PoisonError::into_inner);
        evict(&mut memory, MAX_CACHED, |_| false);
        memory.insert(cert.clone(), found.clone());
        found
    }

    fn refuse(&self, cert: &CertRef, refusal: SignatureError) {
        let mut refused = lock(&self.refused);
        evict(&mut refused, MAX_REFUSED, |(at, _)| {
            at.elapsed() >= REFUSE_FOR
        });
        refused.insert(cert.clone(), (Instant::now(), refusal));
    }

    /// Why `cert` was refused, if that was less than [`REFUSE_FOR`] ago.
    fn refused_lately(&self, cert: &CertRef) -> Option<SignatureError> {
        let refused = lock(&self.refused);
        let (at, refusal) = refused.get(cert)?;
        (at.elapsed() < REFUSE_FOR).then(|| refusal.clone())
    }
}

/// Makes room for one more entry in `map` (at most `max`): first by
/// dropping the entries `stale` says may go, then one arbitrary entry.
fn evict<V>(map: &mut HashMap<CertRef, V>, max: usize, stale: impl Fn(&V) -> bool) {
    if map.len() < max {
        return;
    }
    map.retain(|_, value| !stale(value));
    if map.len() >= max
        && let Some(any) = map.keys().next().cloned()
    {
        map.remove(&any);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A token bucket of fetches: [`FETCH_BURST`] at most, one more a second.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full() -> Self {
        Bucket {
            tokens: FETCH_BURST,
            at: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + refill).min(FETCH_BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
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
