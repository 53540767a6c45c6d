//! Wallets and their entries. Every balance change is an entry row whose
//! natural key `(provider, kind, source_ref)` is unique, and the balance moves
//! in the same statement that writes the entry, so `balance_minor` always
//! equals the sum of the wallet's entries.

use sqlx::PgConnection;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Credit,
    Refund,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Credit => "credit",
            EntryKind::Refund => "refund",
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

#[derive(Debug, PartialEq, Eq)]
pub enum Posted {
    Posted {
        entry_id: i64,
        balance_minor: i64,
    },
    /// The natural key was taken: by this event id, the balance did not move.
    AlreadyPosted {
        owner_event_id: String,
    },
}

/// A posted entry, as far as refunds need to know it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub user_id: String,
    pub currency: String,
    pub amount_minor: i64,
    pub event_id: String,
}

/// Inserts the entry and moves the balance, in one statement; does nothing if
/// the natural key is already taken.
pub async fn post(conn: &mut PgConnection, entry: &NewEntry<'_>) -> Result<Posted, sqlx::Error> {
    let posted = sqlx::query!(
        r#"
        with entry as (
            insert into wallet_entries
                (user_id, currency, amount_minor, kind, provider, source_ref, event_id, parent_ref)
            values ($1, $2, $3, $4, $5, $6, $7, $8)
            on conflict (provider, kind, source_ref) do nothing
            returning id, user_id, currency, amount_minor
        ), wallet as (
            insert into wallets (user_id, currency, balance_minor)
            select user_id, currency, amount_minor from entry
            on conflict (user_id, currency) do update
                set balance_minor = wallets.balance_minor + excluded.balance_minor,
                    updated_at = now()
            returning balance_minor
        )
        select entry.id as "entry_id!", wallet.balance_minor as "balance_minor!"
        from entry, wallet
        "#,
        entry.user_id,
        entry.currency,
        entry.amount_minor,
        entry.kind.as_str(),
        entry.provider,
        entry.source_ref,
        entry.event_id,
        entry.parent_ref,
    )
    .fetch_optional(&mut *conn)
    .await?;

    match posted {
        Some(row) => Ok(Posted::Posted {
            entry_id: row.entry_id,
            balance_minor: row.balance_minor,
        }),
        None => {
            let owner = find(conn, entry.provider, entry.kind, entry.source_ref)
                .await?
                .ok_or(sqlx::Error::RowNotFound)?;
            Ok(Posted::AlreadyPosted {
                owner_event_id: owner.event_id,
            })
        }
    }
}

/// The entry with this natural key, if any.
pub async fn find(
    conn: &mut PgConnection,
    provider: &str,
    kind: EntryKind,
    source_ref: &str,
) -> Result<Option<Entry>, sqlx::Error> {
    sqlx::query_as!(
        Entry,
        r#"
        select user_id, currency, amount_minor, event_id
        from wallet_entries
        where provider = $1 and kind = $2 and source_ref = $3
        "#,
        provider,
        kind.as_str(),
        source_ref
    )
    .fetch_optional(conn)
    .await
}

/// A credit, with what was debited against it since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credited {
    pub source_ref: String,
    pub user_id: String,
    pub currency: String,
    pub amount_minor: i64,
    pub refunded_minor: i64,
}

/// `provider`'s credits keyed by one of `source_refs`, or made in
/// `[since, until)` (Unix seconds), each with its refunds' total.
pub async fn credits_for_audit(
    pool: &sqlx::PgPool,
    provider: &str,
    source_refs: &[String],
    since: i64,
    until: i64,
) -> Result<Vec<Credited>, sqlx::Error> {
    sqlx::query_as!(
        Credited,
        r#"
        select c.source_ref, c.user_id, c.currency, c.amount_minor,
               coalesce((select -sum(r.amount_minor) from wallet_entries r
                         where r.provider = c.provider and r.kind = 'refund'
                           and r.parent_ref = c.source_ref), 0)::bigint as "refunded_minor!"
        from wallet_entries c
        where c.provider = $1 and c.kind = 'credit'
          and (c.source_ref = any($2::text[])
               or (c.created_at >= to_timestamp($3::bigint) and c.created_at < to_timestamp($4::bigint)))
        "#,
        provider,
        source_refs,
        since,
        until,
    )
    .fetch_all(pool)
    .await
}

/// Which of `source_refs` have an entry of `kind` under `provider`.
pub async fn existing(
    pool: &sqlx::PgPool,
    provider: &str,
    kind: EntryKind,
    source_refs: &[String],
) -> Result<std::collections::HashSet<String>, sqlx::Error> {
    let found = sqlx::query_scalar!(
        r#"
        select source_ref from wallet_entries
        where provider = $1 and kind = $2 and source_ref = any($3::text[])
        "#,
        provider,
        kind.as_str(),
        source_refs,
    )
    .fetch_all(pool)
    .await?;
    Ok(found.into_iter().collect())
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
    let row = sqlx::query!(
        r#"
        select coalesce(-sum(amount_minor), 0)::bigint as "total!",
               coalesce(-sum(amount_minor) filter (
                   where left(source_ref, length($3::text) + 1) = $3::text || ':'
                     and substr(source_ref, length($3::text) + 2) ~ '^[0-9]+$'
               ), 0)::bigint as "matching!"
        from wallet_entries
        where provider = $1 and kind = 'refund' and parent_ref = $2
        "#,
        provider,
        parent_ref,
        of_charge
    )
    .fetch_one(conn)
    .await?;
    Ok(Refunded {
        total_minor: row.total,
        matching_minor: row.matching,
    })
}

/// A wallet whose balance differs from the sum of its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub user_id: String,
    pub currency: String,
    pub balance_minor: i64,
    pub entries_minor: i64,
}

/// Every wallet whose balance is not the sum of its entries (none, normally).
pub async fn mismatches(conn: &mut PgConnection) -> Result<Vec<Mismatch>, sqlx::Error> {
    sqlx::query_as!(
        Mismatch,
        r#"
        select w.user_id, w.currency, w.balance_minor,
               coalesce(e.total, 0)::bigint as "entries_minor!"
        from wallets w
        left join (
            select user_id, currency, sum(amount_minor) as total
            from wallet_entries group by user_id, currency
        ) e using (user_id, currency)
        where w.balance_minor <> coalesce(e.total, 0)
        order by w.user_id, w.currency
        "#
    )
    .fetch_all(conn)
    .await
}

/// Entries newer than `since` (Unix seconds) whose event is not recorded:
/// within the retention window every entry must have one.
pub async fn orphan_entries(
    conn: &mut PgConnection,
    since: f64,
) -> Result<Vec<(i64, String, String)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select w.id, w.provider, w.event_id
        from wallet_entries w
        where w.created_at >= to_timestamp($1::float8)
          and not exists (select 1 from processed_events e
                          where e.provider = w.provider and e.event_id = w.event_id)
        order by w.id
        "#,
        since,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.id, r.provider, r.event_id))
        .collect())
}

/// What a `webhookd drill` run left behind, found by its id prefix
/// (`drill_{run}_`): event rows and entries per provider, outbox rows per
/// topic, refunds still waiting, wallet totals per currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrillCounts {
    pub stripe_events: i64,
    pub razorpay_events: i64,
    pub stripe_credits: i64,
    pub stripe_refunds: i64,
    pub razorpay_credits: i64,
    pub razorpay_refunds: i64,
    /// Outbox rows of the run's events: `wallet.credited`, `wallet.debited`,
    /// `payment.receipt`, `subscription.changed`.
    pub credited: i64,
    pub debited: i64,
    pub receipts: i64,
    pub subscription_changes: i64,
    /// The run's events still deferred (a refund whose credit never came).
    pub deferred: i64,
    /// The run's wallets' balances summed per currency.
    pub totals: Vec<(String, i64)>,
    /// The run's wallets whose balance is not the sum of their entries.
    pub mismatched_wallets: i64,
}

pub async fn drill_counts(pool: &sqlx::PgPool, prefix: &str) -> Result<DrillCounts, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        with events as (
            select provider, count(*) as n from processed_events
            where starts_with(event_id, 'evt_' || $1) group by provider
        ), entries as (
            select provider, kind, count(*) as n from wallet_entries
            where (kind = 'credit' and (starts_with(source_ref, 'pi_' || $1)
                                        or starts_with(source_ref, 'pay_' || $1)))
               or (kind = 'refund' and (starts_with(parent_ref, 'pi_' || $1)
                                        or starts_with(parent_ref, 'pay_' || $1)))
            group by provider, kind
        ), topics as (
            select topic, count(*) as n from outbox
            where starts_with(event_id, 'evt_' || $1) group by topic
        )
        select
            coalesce((select n from events where provider = 'stripe'), 0) as "stripe_events!",
            coalesce((select n from events where provider = 'razorpay'), 0) as "razorpay_events!",
            coalesce((select n from entries where provider = 'stripe' and kind = 'credit'), 0)
                as "stripe_credits!",
            coalesce((select n from entries where provider = 'stripe' and kind = 'refund'), 0)
                as "stripe_refunds!",
            coalesce((select n from entries where provider = 'razorpay' and kind = 'credit'), 0)
                as "razorpay_credits!",
            coalesce((select n from entries where provider = 'razorpay' and kind = 'refund'), 0)
                as "razorpay_refunds!",
            coalesce((select n from topics where topic = 'wallet.credited'), 0) as "credited!",
            coalesce((select n from topics where topic = 'wallet.debited'), 0) as "debited!",
            coalesce((select n from topics where topic = 'payment.receipt'), 0) as "receipts!",
            coalesce((select n from topics where topic = 'subscription.changed'), 0)
                as "subscription_changes!",
            (select count(*) from deferred_events where starts_with(event_id, 'evt_' || $1))
                as "deferred!",
            (select count(*) from wallets w
             where starts_with(w.user_id, $1)
               and w.balance_minor <> (select coalesce(sum(e.amount_minor), 0) from wallet_entries e
                                       where e.user_id = w.user_id and e.currency = w.currency))
                as "mismatched_wallets!"
        "#,
        prefix,
    )
    .fetch_one(pool)
    .await?;
    let totals = sqlx::query!(
        r#"
        select currency, sum(balance_minor)::bigint as "total!"
        from wallets where starts_with(user_id, $1)
        group by currency order by currency
        "#,
        prefix,
    )
    .fetch_all(pool)
    .await?;
    Ok(DrillCounts {
        stripe_events: row.stripe_events,
        razorpay_events: row.razorpay_events,
        stripe_credits: row.stripe_credits,
        stripe_refunds: row.stripe_refunds,
        razorpay_credits: row.razorpay_credits,
        razorpay_refunds: row.razorpay_refunds,
        credited: row.credited,
        debited: row.debited,
        receipts: row.receipts,
        subscription_changes: row.subscription_changes,
        deferred: row.deferred,
        totals: totals.into_iter().map(|r| (r.currency, r.total)).collect(),
        mismatched_wallets: row.mismatched_wallets,
    })
}
