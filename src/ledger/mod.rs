//! Wallets and their entries. Every balance change is an entry row whose
//! natural key `(provider, kind, source_ref)` is unique, and the balance moves
//! in the same statement that writes the entry, so `balance_minor` always
//! equals the sum of the wallet's entries.

use std::collections::HashMap;

use crate::db;
use sqlx::PgConnection;

mod audit;
mod browse;

pub use audit::{Credited, Mismatch, credits_for_audit, existing, mismatches, orphan_entries};
pub use browse::{EntryRow, WalletRow, entries_of_event, entries_of_user, wallets_of_user};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Credit,
    Refund,
    /// A credit granted per paid invoice (`WEBHOOKD_SOURCE_<NAME>_INVOICE_CREDITS`),
    /// keyed by the invoice.
    InvoiceCredit,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Credit => "credit",
            EntryKind::Refund => "refund",
            EntryKind::InvoiceCredit => "invoice_credit",
        }
    }
}

/// An entry to post: positive `amount_minor` credits, negative debits.
#[derive(Debug)]
pub struct NewEntry<'a> {
    pub user_id: &'a str,
    pub currency: &'a str,
    pub amount_minor: i64,
    pub kind: EntryKind,
    pub provider: &'a str,
    pub source_ref: &'a str,
    pub event_id: &'a str,
    /// For a refund: the `source_ref` of the credit it debits.
    pub parent_ref: Option<&'a str>,
}

/// A posted entry and its wallet's balance right after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posted {
    pub entry_id: i64,
    pub balance_minor: i64,
}

/// A posted entry, as far as refunds need to know it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub user_id: String,
    pub currency: String,
    pub amount_minor: i64,
    pub event_id: String,
}

/// Inserts the entries in order and moves their wallets (one update per
/// wallet, in key order), in one statement. An entry whose natural key is
/// taken (by an earlier entry, in this call or before) posts nothing: `None`
/// at its index, and the balance does not move. Call with the wallets'
/// locks held ([`lock_wallets`]).
pub async fn post<'a>(
    conn: &mut PgConnection,
    entries: &[NewEntry<'a>],
) -> Result<Vec<Option<Posted>>, sqlx::Error> {
    let column = |f: fn(&NewEntry<'a>) -> &'a str| entries.iter().map(f).collect::<Vec<_>>();
    let amounts: Vec<i64> = entries.iter().map(|e| e.amount_minor).collect();
    let parents: Vec<Option<&str>> = entries.iter().map(|e| e.parent_ref).collect();
    let rows = sqlx::query!(
        r#"
        with input as (
            select * from unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
                with ordinality
                as input (user_id, currency, amount_minor, kind, provider, source_ref, event_id, parent_ref, position)
        ), entry as (
            -- In order: of two entries with one natural key, the first posts.
            insert into wallet_entries
                (user_id, currency, amount_minor, kind, provider, source_ref, event_id, parent_ref)
            select user_id, currency, amount_minor, kind, provider, source_ref, event_id, parent_ref
            from input
            order by position
            on conflict (provider, kind, source_ref) do nothing
            returning id, user_id, currency, amount_minor, provider, kind, source_ref
        ), wallet as (
            insert into wallets (user_id, currency, balance_minor)
            select user_id, currency, sum(amount_minor)::bigint
            from entry
            group by user_id, currency
            order by user_id, currency
            on conflict (user_id, currency) do update
                set balance_minor = wallets.balance_minor + excluded.balance_minor,
                    updated_at = now()
            returning user_id, currency, balance_minor
        )
        -- The balance right after each entry: the wallet's new balance less
        -- the entries of this statement that come after it.
        select (first.position - 1)::int as "index!", entry.id as "entry_id!",
               (wallet.balance_minor - coalesce(sum(entry.amount_minor) over (
                   partition by entry.user_id, entry.currency order by first.position
                   rows between 1 following and unbounded following), 0))::bigint as "balance_minor!"
        from entry
        join wallet using (user_id, currency)
        join (select provider, kind, source_ref, min(position) as position
              from input group by provider, kind, source_ref) as first
            using (provider, kind, source_ref)
        "#,
        &column(|e| e.user_id) as &[&str],
        &column(|e| e.currency) as &[&str],
        &amounts,
        &column(|e| e.kind.as_str()) as &[&str],
        &column(|e| e.provider) as &[&str],
        &column(|e| e.source_ref) as &[&str],
        &column(|e| e.event_id) as &[&str],
        &parents as &[Option<&str>],
    )
    .fetch_all(conn)
    .await?;
    let mut posted = vec![None; entries.len()];
    for row in rows {
        if let Some(slot) = usize::try_from(row.index)
            .ok()
            .and_then(|i| posted.get_mut(i))
        {
            *slot = Some(Posted {
                entry_id: row.entry_id,
                balance_minor: row.balance_minor,
            });
        }
    }
    Ok(posted)
}

/// The event that posted each of `source_refs`' entries of `kind`.
pub async fn owners(
    conn: &mut PgConnection,
    provider: &str,
    kind: EntryKind,
    source_refs: &[&str],
) -> Result<HashMap<String, String>, sqlx::Error> {
    let found = find_many(conn, provider, kind, source_refs).await?;
    Ok(found
        .into_iter()
        .map(|(source_ref, entry)| (source_ref, entry.event_id))
        .collect())
}

/// The lock class of wallets: taken after every lock of class 1 (the
/// effects' keys), since which wallet a refund debits is known only once its
/// credit's lock is held.
pub const WALLET_LOCK_CLASS: i16 = 2;

/// The key of a wallet: its advisory lock, and the order its outbox rows
/// keep when ordered delivery is on.
/// Moves the entries' ids past every id handed out so far, even by a
/// database this one was restored from ([`db::sequence_past_now`]): an
/// entry written after a restore never takes the `entry_id` a receiver saw
/// in another message. Run at each start of `serve` and by `migrate`.
pub async fn ids_past_now(pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    db::sequence_past_now(pool, "wallet_entries_id_seq").await
}

pub fn wallet_key(user_id: &str, currency: &str) -> String {
    format!("wallet:{user_id}:{currency}")
}

/// Takes the locks of `wallets` and of the wallets credited by the credits
/// `credits_of` (`(provider, source_ref)`), in one statement, in the global
/// lock order (class [`WALLET_LOCK_CLASS`], by hash). Call with the
/// credits' locks held, so that no credit of `credits_of` appears meanwhile.
/// Returns the owners of those of `credits_of` that exist.
pub async fn lock_wallets(
    conn: &mut PgConnection,
    wallets: &[(&str, &str)],
    credits_of: &[(&str, &str)],
) -> Result<Vec<CreditOwner>, sqlx::Error> {
    let keys: Vec<String> = wallets.iter().map(|(u, c)| wallet_key(u, c)).collect();
    let providers: Vec<&str> = credits_of.iter().map(|(p, _)| *p).collect();
    let refs: Vec<&str> = credits_of.iter().map(|(_, r)| *r).collect();
    let rows = sqlx::query!(
        r#"
        with debited as (
            -- One natural-key lookup per credit, whatever the statistics
            -- say about the table.
            select credit.provider, credit.source_ref, e.user_id, e.currency
            from unnest($2::text[], $3::text[]) as credit (provider, source_ref)
            cross join lateral (
                select user_id, currency from wallet_entries w
                where w.provider = credit.provider and w.kind = 'credit'
                  and w.source_ref = credit.source_ref
                limit 1  -- never flattened into a join
            ) as e
        ), locked as (
            -- Volatile, so evaluated once and whole, before any row below.
            select count(*) as n from (
                select pg_advisory_xact_lock(hash) from (
                    select distinct hashtextextended(key, 0) as hash from (
                        select key from unnest($1::text[]) as key
                        union
                        -- the key of wallet_key
                        select 'wallet:' || user_id || ':' || currency from debited
                    ) as keys
                    order by hash
                ) as sorted
            ) as taken
        )
        select debited.provider as "provider?", debited.source_ref as "source_ref?",
               debited.user_id as "user_id?"
        from locked left join debited on true
        "#,
        &keys,
        &providers as &[&str],
        &refs as &[&str],
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            Some(CreditOwner {
                provider: row.provider?,
                source_ref: row.source_ref?,
                user_id: row.user_id?,
            })
        })
        .collect())
}

/// Whose wallet a payment's credit moved ([`lock_wallets`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreditOwner {
    pub provider: String,
    pub source_ref: String,
    pub user_id: String,
}

/// The entry with this natural key, if any.
pub async fn find(
    conn: &mut PgConnection,
    provider: &str,
    kind: EntryKind,
    source_ref: &str,
) -> Result<Option<Entry>, sqlx::Error> {
    let mut found = find_many(conn, provider, kind, &[source_ref]).await?;
    Ok(found.remove(source_ref))
}

/// The entries of `kind` keyed by each of `source_refs` that exist, by
/// `source_ref`.
pub async fn find_many(
    conn: &mut PgConnection,
    provider: &str,
    kind: EntryKind,
    source_refs: &[&str],
) -> Result<HashMap<String, Entry>, sqlx::Error> {
    if source_refs.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query!(
        r#"
        select wanted.source_ref as "source_ref!", e.user_id, e.currency, e.amount_minor, e.event_id
        from unnest($3::text[]) as wanted (source_ref)
        -- One natural-key lookup per ref: a generic plan of `= any(...)`
        -- may scan another index.
        cross join lateral (
            select user_id, currency, amount_minor, event_id from wallet_entries w
            where w.provider = $1 and w.kind = $2 and w.source_ref = wanted.source_ref
            limit 1
        ) as e
        "#,
        provider,
        kind.as_str(),
        source_refs as &[&str],
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let entry = Entry {
                user_id: row.user_id,
                currency: row.currency,
                amount_minor: row.amount_minor,
                event_id: row.event_id,
            };
            (row.source_ref, entry)
        })
        .collect())
}

/// What was already debited against a credit: in all, and for the refund
/// entries of one charge (`of_charge`): those keyed exactly
/// `{charge}:{digits}`, never by a prefix (charge `ch_1` owns `ch_1:500`,
/// not `ch_1:5:500`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refunded {
    pub total_minor: i64,
    pub matching_minor: i64,
}

pub async fn refunded(
    conn: &mut PgConnection,
    provider: &str,
    parent_ref: &str,
    of_charge: Option<&str>,
) -> Result<Refunded, sqlx::Error> {
    let mut refunded = refunded_many(conn, provider, &[(parent_ref, of_charge)]).await?;
    refunded
        .pop()
        .ok_or_else(|| sqlx::Error::Protocol("a sum of refunds returned no row".into()))
}

/// [`refunded`] of each `(parent_ref, of_charge)`, in order, in one
/// statement.
pub async fn refunded_many(
    conn: &mut PgConnection,
    provider: &str,
    credits: &[(&str, Option<&str>)],
) -> Result<Vec<Refunded>, sqlx::Error> {
    if credits.is_empty() {
        return Ok(Vec::new());
    }
    let parents: Vec<&str> = credits.iter().map(|(parent, _)| *parent).collect();
    let charges: Vec<Option<&str>> = credits.iter().map(|(_, charge)| *charge).collect();
    let rows = sqlx::query!(
        r#"
        select credit.position, sums.total as "total!", sums.matching as "matching!"
        from unnest($2::text[], $3::text[]) with ordinality as credit (parent_ref, of_charge, position)
        cross join lateral (
            select coalesce(-sum(amount_minor), 0)::bigint as total,
                   coalesce(-sum(amount_minor) filter (
                       where left(source_ref, length(credit.of_charge) + 1) = credit.of_charge || ':'
                         and substr(source_ref, length(credit.of_charge) + 2) ~ '^[0-9]+$'
                   ), 0)::bigint as matching
            from wallet_entries
            where provider = $1 and kind = 'refund' and parent_ref = credit.parent_ref
        ) as sums
        order by credit.position
        "#,
        provider,
        &parents as &[&str],
        &charges as &[Option<&str>],
    )
    .fetch_all(conn)
    .await?;
    if rows.len() != credits.len() {
        return Err(sqlx::Error::Protocol(
            "a sum of refunds per credit is missing".into(),
        ));
    }
    Ok(rows
        .into_iter()
        .map(|row| Refunded {
            total_minor: row.total,
            matching_minor: row.matching,
        })
        .collect())
}

/// The ledger of a `webhookd drill` run's wallets and payments, found by
/// their id prefixes: entries per provider and kind, wallet totals per
/// currency, wallets whose balance is not the sum of their entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrillLedger {
    /// `(provider, kind, entries)`: credits of payments, refunds of credits
    /// whose payment id starts with one of the run's payment prefixes.
    pub entries: Vec<(String, String, i64)>,
    /// The run's wallets' balances summed per currency.
    pub totals: Vec<(String, i64)>,
    pub mismatched_wallets: i64,
}

/// [`DrillLedger`] of the wallets whose user id starts with `user_prefix`
/// and the payments whose id starts with one of `payment_prefixes`.
pub async fn drill_counts(
    pool: &sqlx::PgPool,
    user_prefix: &str,
    payment_prefixes: &[String],
) -> Result<DrillLedger, sqlx::Error> {
    let query = sqlx::query!(
        r#"
        select provider, kind, count(*) as "n!" from wallet_entries
        where exists (select from unnest($1::text[]) as p (prefix)
                      where (kind = 'credit' and starts_with(source_ref, p.prefix))
                         or (kind = 'refund' and starts_with(parent_ref, p.prefix)))
        group by provider, kind order by provider, kind
        "#,
        payment_prefixes,
    );
    let entries = db::read_only(pool).all(query).await?;
    let query = sqlx::query!(
        r#"
        select count(*) as "n!" from wallets w
        where starts_with(w.user_id, $1)
          and w.balance_minor <> (select coalesce(sum(e.amount_minor), 0) from wallet_entries e
                                  where e.user_id = w.user_id and e.currency = w.currency)
        "#,
        user_prefix,
    );
    let mismatched_wallets = db::read_only(pool).one(query).await?.n;
    let query = sqlx::query!(
        r#"
        select currency, sum(balance_minor)::bigint as "total!"
        from wallets where starts_with(user_id, $1)
        group by currency order by currency
        "#,
        user_prefix,
    );
    let totals = db::read_only(pool).all(query).await?;
    Ok(DrillLedger {
        entries: entries
            .into_iter()
            .map(|r| (r.provider, r.kind, r.n))
            .collect(),
        totals: totals.into_iter().map(|r| (r.currency, r.total)).collect(),
        mismatched_wallets,
    })
}
