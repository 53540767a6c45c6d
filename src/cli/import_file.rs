//! `webhookd import --provider NAME --from-csv FILE`: the event ids an
//! earlier handler applied, one a line, recorded as imported (without
//! effects), so that their redelivery or sweep is a duplicate.

use std::path::Path;

use serde::Serialize;
use sqlx::PgPool;

use super::id;
use crate::events::{self, ImportRow};
use crate::providers::{UNKNOWN_TYPE, is_identifier};
use crate::sweep;

/// The JSON line of an import from a file.
#[derive(Debug, Serialize)]
pub(super) struct ImportedFile {
    provider: String,
    rows: u64,
    imported: u64,
    already_seen: u64,
    dry_run: bool,
}

/// Rows are inserted this many to a statement.
const IMPORT_CHUNK: usize = 10_000;

/// Records the event ids of the file at `path` under `provider`, and its
/// cut-over at `now` (no sweep of it reads earlier); a dry run counts those
/// never recorded and writes nothing.
pub(super) async fn run(
    pool: &PgPool,
    provider: &str,
    path: &Path,
    dry_run: bool,
    now: i64,
) -> anyhow::Result<ImportedFile> {
    let provider = provider.to_ascii_lowercase();
    anyhow::ensure!(
        is_identifier(&provider),
        "--provider must be a provider or source name"
    );
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", id(&path.display().to_string())))?;
    // Every line is checked before anything is written.
    let rows = parse_rows(&text)?;
    let mut imported = 0;
    for chunk in rows.chunks(IMPORT_CHUNK) {
        imported += if dry_run {
            let ids: Vec<String> = chunk.iter().map(|r| r.event_id.clone()).collect();
            let seen = events::recorded(pool, &provider, &ids).await?;
            (ids.len() - seen.len()) as u64
        } else {
            events::import_rows(pool, &provider, chunk).await?
        };
    }
    if !dry_run {
        // What an earlier handler applied ends now: no sweep reads earlier.
        sweep::store::cut_over(pool, &provider, now).await?;
    }
    let total = rows.len() as u64;
    Ok(ImportedFile {
        provider,
        rows: total,
        imported,
        already_seen: total - imported,
        dry_run,
    })
}

/// `event_id[,event_type[,processed_at]]` a line; blank lines, `#` comments
/// and a header line (`event_id,...`) are skipped.
fn parse_rows(text: &str) -> anyhow::Result<Vec<ImportRow>> {
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split(',').map(str::trim);
        let event_id = fields.next().unwrap_or_default();
        if n == 0 && event_id == "event_id" {
            continue;
        }
        let at_line = || format!("line {}", n + 1);
        anyhow::ensure!(
            is_identifier(event_id),
            "{}: the event id is not 1 to 255 printable ASCII characters",
            at_line()
        );
        let event_type = match fields.next().filter(|t| !t.is_empty()) {
            Some(kind) if is_identifier(kind) => kind.to_owned(),
            Some(_) => anyhow::bail!("{}: the event type is not an identifier", at_line()),
            None => UNKNOWN_TYPE.to_owned(),
        };
        let processed_at = match fields.next().filter(|t| !t.is_empty()) {
            Some(at) => Some(unix_time(at).ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: processed_at is neither RFC 3339 nor Unix seconds",
                    at_line()
                )
            })?),
            None => None,
        };
        anyhow::ensure!(
            fields.next().is_none(),
            "{}: more than three columns",
            at_line()
        );
        rows.push(ImportRow {
            event_id: event_id.to_owned(),
            event_type,
            processed_at,
        });
    }
    Ok(rows)
}

/// RFC 3339 or Unix seconds, within what Postgres stores.
fn unix_time(text: &str) -> Option<i64> {
    let seconds = match text.parse::<i64>() {
        Ok(seconds) => seconds,
        Err(_) => {
            let at = humantime::parse_rfc3339_weak(text).ok()?;
            i64::try_from(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs()).ok()?
        }
    };
    crate::providers::is_unix_time(seconds).then_some(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_files_are_read_strictly_and_every_line_is_checked() {
        let rows = parse_rows(
            "event_id,event_type,processed_at\n\
             evt_1\n\
             # a comment\n\
             \n\
             evt_2, invoice.paid , 2026-11-01T10:00:00Z\r\n\
             evt_3,,1793527200\n",
        )
        .unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].event_type, "unknown");
        assert_eq!(
            (rows[1].event_type.as_str(), rows[1].processed_at),
            ("invoice.paid", Some(1_793_527_200))
        );
        assert_eq!(rows[2].processed_at, Some(1_793_527_200));
        for bad in [
            "evt 1",
            "evt_1,a b",
            "evt_1,x,yesterday",
            "evt_1,x,1,extra",
            "evt_1,x,-5",
        ] {
            let error = parse_rows(&format!("evt_0\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(error.starts_with("line 2:"), "{bad}: {error}");
        }
    }
}
