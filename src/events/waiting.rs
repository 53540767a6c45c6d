//! Events deferred until what they wait for is applied: parking one
//! ([`defer`]) and asking whether any waits ([`waiting_any`]), which a
//! transaction may already know ([`knowing_nothing_waits`]).

use std::cell::RefCell;
use std::collections::HashSet;
use std::future::Future;

use sqlx::PgConnection;

tokio::task_local! {
    /// The `(provider, waits_for)` keys the running transaction knows
    /// nothing waits for.
    static NOTHING_WAITS: RefCell<HashSet<(String, String)>>;
}

/// Runs `transaction` knowing that no event waits for any of
/// `nothing_waits`, so that [`waiting_any`] answers for those keys without
/// a statement. Only for keys whose locks the transaction holds, read once
/// they were taken ([`super::claim_and_lock`]'s probes): no other
/// transaction can then defer an event for them, and this one's own
/// [`defer`] forgets the key it defers for.
pub async fn knowing_nothing_waits<T>(
    nothing_waits: HashSet<(String, String)>,
    transaction: impl Future<Output = T>,
) -> T {
    NOTHING_WAITS
        .scope(RefCell::new(nothing_waits), transaction)
        .await
}

/// Whether the running transaction knows nothing waits for `key`.
fn known_free(provider: &str, key: &str) -> bool {
    NOTHING_WAITS
        .try_with(|known| {
            known
                .borrow()
                .contains(&(provider.to_owned(), key.to_owned()))
        })
        .unwrap_or(false)
}

/// Which of `waits_for` (what `provider`'s deferred events wait for: a
/// credit's key, an owner's) have events waiting.
pub async fn waiting(
    conn: &mut PgConnection,
    provider: &str,
    waits_for: &[&str],
) -> Result<HashSet<String>, sqlx::Error> {
    let keys: Vec<(&str, &str)> = waits_for.iter().map(|key| (provider, *key)).collect();
    let found = waiting_any(conn, &keys).await?;
    Ok(found.into_iter().map(|(_, key)| key).collect())
}

/// [`waiting`] of `(provider, waits_for)` keys of any providers, in one
/// statement; none for the keys the transaction knows nothing waits for
/// ([`knowing_nothing_waits`]).
pub async fn waiting_any(
    conn: &mut PgConnection,
    keys: &[(&str, &str)],
) -> Result<HashSet<(String, String)>, sqlx::Error> {
    let unknown: Vec<(&str, &str)> = keys
        .iter()
        .copied()
        .filter(|(provider, key)| !known_free(provider, key))
        .collect();
    if unknown.is_empty() {
        return Ok(HashSet::new());
    }
    let providers: Vec<&str> = unknown.iter().map(|(provider, _)| *provider).collect();
    let waits_for: Vec<&str> = unknown.iter().map(|(_, key)| *key).collect();
    let found = sqlx::query!(
        r#"
        select wanted.provider as "provider!", wanted.waits_for as "waits_for!"
        from unnest($1::text[], $2::text[]) as wanted (provider, waits_for)
        where exists (
            select 1 from deferred_events d
            where d.provider = wanted.provider and d.waits_for = wanted.waits_for
        )
        "#,
        &providers as &[&str],
        &waits_for as &[&str],
    )
    .fetch_all(conn)
    .await?;
    Ok(found
        .into_iter()
        .map(|row| (row.provider, row.waits_for))
        .collect())
}

/// Parks an event until `waits_for` (the key of its dependency) is applied.
pub async fn defer(
    conn: &mut PgConnection,
    provider: &str,
    event_id: &str,
    waits_for: &str,
) -> Result<(), sqlx::Error> {
    defer_many(conn, &[(provider, event_id, waits_for)]).await
}

/// [`defer`] of each `(provider, event_id, waits_for)`, in one statement
/// when no two are one event.
pub async fn defer_many(
    conn: &mut PgConnection,
    deferrals: &[(&str, &str, &str)],
) -> Result<(), sqlx::Error> {
    // Forgotten first: should the insert fail, the keys are asked again.
    let _outside_a_transaction = NOTHING_WAITS.try_with(|known| {
        let mut known = known.borrow_mut();
        for (provider, _, waits_for) in deferrals {
            known.remove(&((*provider).to_owned(), (*waits_for).to_owned()));
        }
    });
    for run in crate::db::distinct_runs(deferrals, |(provider, event_id, _)| (*provider, *event_id))
    {
        let providers: Vec<&str> = run.iter().map(|(p, ..)| *p).collect();
        let event_ids: Vec<&str> = run.iter().map(|(_, e, _)| *e).collect();
        let keys: Vec<&str> = run.iter().map(|(.., k)| *k).collect();
        sqlx::query!(
            r#"
            insert into deferred_events (provider, event_id, waits_for)
            select * from unnest($1::text[], $2::text[], $3::text[])
            on conflict (provider, event_id) do update set waits_for = excluded.waits_for
            "#,
            &providers as &[&str],
            &event_ids as &[&str],
            &keys as &[&str],
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}
