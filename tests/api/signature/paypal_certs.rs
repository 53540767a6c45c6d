//! A fake of PayPal's certificate endpoint (`GET /v1/notifications/certs/{id}`
//! on `api.paypal.com` and `api.sandbox.paypal.com`), over real TLS with a
//! test root's server certificate, and the test keys that sign deliveries.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use webhookd::providers::paypal::certs::CertSettings;

/// The test certificates and keys (`tests/fixtures/paypal/make.py`).
pub fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/paypal")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The tests' clock, 2027-06-01T00:00:00Z: inside every fixture's validity
/// but `expired.pem`'s.
pub const NOW: i64 = 1_811_808_000;

/// RFC 3339 of a Unix time, as PayPal sends `PAYPAL-TRANSMISSION-TIME`.
pub fn rfc3339(unix: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// `PAYPAL-TRANSMISSION-SIG` for `message` under the key in fixture `key`,
/// signed as `webhookd send paypal` signs.
pub fn sign(key: &str, message: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/paypal")
        .join(key);
    webhookd::cli::send::paypal::sign(&path, message).unwrap()
}

/// A directory of its own under the system's temporary directory.
pub fn temp_dir(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "webhookd-{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What the fake answers for a certificate id.
#[derive(Debug, Clone)]
pub enum Answer {
    Pem(String),
    Status(StatusCode),
    RedirectTo(String),
}

#[derive(Debug, Default)]
struct Served {
    answers: Mutex<HashMap<String, Answer>>,
    requests: Mutex<Vec<String>>,
}

/// The running fake. Cheap to clone.
#[derive(Debug, Clone)]
pub struct FakeCerts {
    pub address: SocketAddr,
    served: Arc<Served>,
}

impl FakeCerts {
    pub async fn start() -> FakeCerts {
        let served = Arc::new(Served::default());
        let router = Router::new()
            .route("/v1/notifications/certs/{id}", get(cert))
            .fallback(|request: axum::extract::Request| async move {
                (StatusCode::NOT_FOUND, format!("no route {}", request.uri()))
            })
            .with_state(served.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(server_config()));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, router) = (acceptor.clone(), router.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(router))
                        .await;
                });
            }
        });
        FakeCerts { address, served }
    }

    pub fn answer(&self, id: &str, answer: Answer) {
        self.served
            .answers
            .lock()
            .unwrap()
            .insert(id.to_owned(), answer);
    }

    /// The paths requested so far.
    pub fn requests(&self) -> Vec<String> {
        self.served.requests.lock().unwrap().clone()
    }

    /// Certificate settings that fetch from this fake and trust the test
    /// root, keeping certificates in `dir`.
    pub fn settings(&self, dir: Option<PathBuf>) -> CertSettings {
        CertSettings {
            dir,
            timeout: std::time::Duration::from_secs(5),
            connect_to: Some(self.address),
            roots: vec![test_root()],
            tls_roots: vec![test_root()],
        }
    }
}

/// The root of the test certificates.
pub fn test_root() -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(fixture("root.pem").as_bytes()).unwrap()
}

async fn cert(State(served): State<Arc<Served>>, UrlPath(id): UrlPath<String>) -> Response {
    served.requests.lock().unwrap().push(id.clone());
    let answer = served.answers.lock().unwrap().get(&id).cloned();
    match answer {
        Some(Answer::Pem(pem)) => {
            ([(header::CONTENT_TYPE, "application/x-pem-file")], pem).into_response()
        }
        Some(Answer::Status(status)) => status.into_response(),
        Some(Answer::RedirectTo(to)) => {
            (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
        }
        None => (StatusCode::NOT_FOUND, "{\"name\":\"RESOURCE_NOT_FOUND\"}").into_response(),
    }
}

fn server_config() -> rustls::ServerConfig {
    let chain = CertificateDer::pem_slice_iter(fixture("tls.pem").as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(fixture("tls.key").as_bytes()).unwrap();
    rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap()
}
