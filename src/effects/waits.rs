//! Where a set of events stops: with the first whose effect releases
//! events that wait for it (they apply right after it, before the rest).
//! Usually known without a statement: the claim read what waits for every
//! key its events may release ([`super::Decoded::awaited`]).

use sqlx::PgConnection;

use super::effect::Error;
use crate::events;

/// How many of `releases` (each event's provider and the keys it would
/// release) apply before what one of them releases: all, or up to and
/// with the first that some event waits for.
pub(super) async fn released_after(
    conn: &mut PgConnection,
    releases: &[(&str, Vec<String>)],
) -> Result<usize, Error> {
    let probes: Vec<(&str, &str)> = releases
        .iter()
        .flat_map(|(provider, keys)| keys.iter().map(|key| (*provider, key.as_str())))
        .collect();
    let waiting = events::waiting_any(conn, &probes).await?;
    let first = releases.iter().position(|(provider, keys)| {
        keys.iter()
            .any(|key| waiting.contains(&((*provider).to_owned(), key.clone())))
    });
    Ok(first.map_or(releases.len(), |i| i + 1))
}
