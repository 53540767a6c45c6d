//! Which sinks take which topics (`outbox_sinks`): what every writer of
//! outbox rows reads, in the statement that writes them ([`super::enqueue`]),
//! whatever process or command it runs in. `serve` makes it what its
//! configuration says when it starts ([`sync`]).

use sqlx::PgPool;

use crate::outbox::Topics;

/// What [`sync`] changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Synced {
    pub added: Vec<String>,
    /// Sinks whose topics changed.
    pub changed: Vec<String>,
    /// Sinks no longer configured, with their rows not delivered: they stay,
    /// listed, until retried to a sink of that name or pruned.
    pub removed: Vec<(String, i64)>,
}

/// Makes the routing `sinks` and nothing else, in one transaction: a sink
/// added takes the rows written from its commit on (none before: see
/// OPERATIONS, "Several sinks"), one removed takes no more.
pub async fn sync(pool: &PgPool, sinks: &[(&str, &Topics)]) -> Result<Synced, sqlx::Error> {
    let names: Vec<&str> = sinks.iter().map(|(name, _)| *name).collect();
    // One text per sink: its patterns, comma-separated (none has a comma).
    let topics: Vec<String> = (sinks.iter())
        .map(|(_, topics)| topics.patterns().join(","))
        .collect();
    let mut tx = crate::db::begin(pool).await?;
    // Serving processes that start together sync one after another.
    sqlx::query!("lock table outbox_sinks in share row exclusive mode")
        .execute(&mut *tx)
        .await?;
    let removed = sqlx::query!(
        r#"
        with removed as (
            delete from outbox_sinks where name <> all($1::text[]) returning name
        )
        select r.name as "name!",
               (select count(*) from outbox o
                where o.sink = r.name and o.delivered_at is null) as "undelivered!"
        from removed r order by r.name
        "#,
        &names as &[&str],
    )
    .fetch_all(&mut *tx)
    .await?;
    let upserted = sqlx::query!(
        r#"
        with given as (
            select name, string_to_array(topics, ',') as topics
            from unnest($1::text[], $2::text[]) as given (name, topics)
        ), before as (
            select name, topics from outbox_sinks
        )
        insert into outbox_sinks as s (name, topics, patterns)
        select name, topics,
               array(select replace(replace(replace(replace(t, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')
                     from unnest(topics) as t)
        from given
        on conflict (name) do update set topics = excluded.topics, patterns = excluded.patterns
            where s.topics is distinct from excluded.topics
        returning s.name as "name!",
                  not exists (select from before b where b.name = s.name) as "added!"
        "#,
        &names as &[&str],
        &topics,
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let mut synced = Synced {
        removed: (removed.into_iter())
            .map(|row| (row.name, row.undelivered))
            .collect(),
        ..Synced::default()
    };
    for row in upserted {
        match row.added {
            true => synced.added.push(row.name),
            false => synced.changed.push(row.name),
        }
    }
    synced.added.sort();
    synced.changed.sort();
    Ok(synced)
}
