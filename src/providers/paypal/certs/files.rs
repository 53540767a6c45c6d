//! The certificate directory: operators' pins read without fetching, and
//! fetched certificates written atomically for the next start.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{CertRef, MAX_PEM_BYTES};
use crate::providers::SignatureError;

/// Creates `dir` (owner only) when missing, then [`check`]s it.
pub(super) fn prepare(dir: &Path) -> anyhow::Result<()> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                anyhow::anyhow!(
                    "WEBHOOKD_PAYPAL_CERT_DIR {} cannot be created: {e}",
                    dir.display()
                )
            })?;
    }
    check(dir)
}

/// A directory others may write is refused: a certificate placed there is
/// trusted without a chain, so whoever can write it can sign deliveries.
/// A directory that does not exist yet passes (it is created owner-only).
pub fn check(dir: &Path) -> anyhow::Result<()> {
    let shown = dir.display();
    let metadata = match std::fs::metadata(dir) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => anyhow::bail!("WEBHOOKD_PAYPAL_CERT_DIR {shown} cannot be read: {e}"),
    };
    anyhow::ensure!(
        metadata.is_dir(),
        "WEBHOOKD_PAYPAL_CERT_DIR {shown} is not a directory"
    );
    anyhow::ensure!(
        metadata.permissions().mode() & 0o022 == 0,
        "WEBHOOKD_PAYPAL_CERT_DIR {shown} is writable by others: a certificate placed there \
         is trusted, so make it writable by webhookd's user alone (chmod go-w)"
    );
    Ok(())
}

fn path(dir: &Path, cert: &CertRef) -> PathBuf {
    dir.join(format!("{}.pem", cert.id))
}

/// The file for `cert`, if there is one: at most [`MAX_PEM_BYTES`] are read.
pub(super) async fn read(dir: &Path, cert: &CertRef) -> Result<Option<Vec<u8>>, SignatureError> {
    let path = path(dir, cert);
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
        let mut pem = Vec::new();
        std::fs::File::open(&path)?
            .take(MAX_PEM_BYTES as u64 + 1)
            .read_to_end(&mut pem)?;
        Ok(pem)
    });
    match read.await {
        Ok(Ok(pem)) if pem.len() <= MAX_PEM_BYTES => Ok(Some(pem)),
        Ok(Ok(_)) => Err(SignatureError::InvalidCertificate(
            "the certificate file is too large",
        )),
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Ok(Err(error)) => {
            tracing::warn!(%error, cert = %cert.id, "cannot read a pinned PayPal certificate");
            Err(SignatureError::KeyUnavailable)
        }
        Err(_) => Err(SignatureError::KeyUnavailable),
    }
}

/// Writes a fetched certificate: a temporary file of its own (never one
/// that exists, never through a link), flushed, then renamed into place,
/// so that a reader sees the whole file or none. Best effort: a directory
/// that cannot be written only costs a fetch at the next start.
pub(super) async fn write(dir: &Path, cert: &CertRef, pem: Vec<u8>) {
    let (final_path, id) = (path(dir, cert), cert.id.clone());
    let partial = dir.join(format!(
        ".{id}.{}.{:x}.partial",
        std::process::id(),
        rand_suffix()
    ));
    let written = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&partial)?;
        file.write_all(&pem)?;
        file.sync_all()?;
        std::fs::rename(&partial, &final_path).inspect_err(|_| {
            let _ = std::fs::remove_file(&partial);
        })
    })
    .await;
    if let Ok(Err(error)) = written {
        tracing::warn!(%error, cert = %id, "cannot keep PayPal's certificate");
    }
}

/// A number unlikely to repeat between two writes.
fn rand_suffix() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    u64::from_le_bytes(bytes)
}
