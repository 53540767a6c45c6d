//! Every business table, read into plain rows that two databases can be
//! compared by: serial ids and timestamps the database stamps are left out,
//! rows are sorted by their natural keys.
//!
//! What is normalised, and why:
//! - `wallet_entries.id` and `outbox.id` differ between databases (a batch
//!   that rolls back still uses up ids), but their order matters where a
//!   consumer sees it: entries are given their `position` among the
//!   entries of their wallet, outbox rows their `position` in their stream
//!   (a wallet's `wallet.*` rows, which carry balances; a subscription's
//!   `subscription.changed` rows; any other row is a stream of its own).
//! - An id that refers to such a row, in `processed_events.detail` (any
//!   key ending in `entry_id` or `outbox_id`: `entry_id`, `outbox_id`,
//!   `receipt_outbox_id`) and in outbox payloads (`entry_id`), is replaced
//!   by that row's natural key: `entry {provider} {kind} {source_ref}`,
//!   `outbox {topic} {dedupe_key}`; an id that refers to no row becomes
//!   `dangling ...`.
//! - Kept as they are, since they name events, not rows: `applied_by`,
//!   `owner_event_id`, `applied_deferred`, `balance_minor`,
//!   `stored_event_time`. `Snapshot::settled` drops what of them depends
//!   on arrival order.
//! - Left out: `received_at`, `created_at`, `updated_at`, `available_at`,
//!   `locked_until`, `learned_at`, `paid_at`; `delivered_at` and `dead_at` are kept as whether they
//!   are set. The `sweeps` table is not read: ingest never writes it.

use std::collections::HashMap;

use serde_json::Value;
use sqlx::PgPool;

#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub events: Vec<Event>,
    pub deferred: Vec<Deferred>,
    pub wallets: Vec<Wallet>,
    pub entries: Vec<Entry>,
    pub payments: Vec<Payment>,
    pub subscriptions: Vec<Subscription>,
    pub owners: Vec<Owner>,
    pub invoices: Vec<Invoice>,
    pub invoice_payments: Vec<InvoicePayment>,
    pub outbox: Vec<OutboxRow>,
}

/// A `processed_events` row.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub outcome: String,
    pub detail: Value,
    pub payload: Value,
    pub provider_created_at: Option<i64>,
    pub received_via: String,
}

/// A `deferred_events` row.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Deferred {
    pub provider: String,
    pub event_id: String,
    pub waits_for: String,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Wallet {
    pub user_id: String,
    pub currency: String,
    pub balance_minor: i64,
}

/// A `wallet_entries` row; `position`: its rank among its wallet's entries.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Entry {
    pub provider: String,
    pub kind: String,
    pub source_ref: String,
    pub user_id: String,
    pub currency: String,
    pub amount_minor: i64,
    pub event_id: String,
    pub parent_ref: Option<String>,
    pub position: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Payment {
    pub provider: String,
    pub payment_id: String,
    pub payment_ref: Option<String>,
    pub user_id: Option<String>,
    pub amount_minor: i64,
    pub currency: String,
    pub status: String,
    pub refunded_minor: i64,
    pub provider_created_at: Option<i64>,
    pub event_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Subscription {
    pub provider: String,
    pub subscription_id: String,
    pub customer_id: Option<String>,
    pub user_id: Option<String>,
    pub status: String,
    pub plan_id: Option<String>,
    pub current_period_end: Option<i64>,
    pub provider_updated_at: i64,
    pub event_id: String,
}

/// An `owners` row: whose a customer or payment is, and who taught it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Owner {
    pub provider: String,
    pub subject: String,
    pub subject_id: String,
    pub user_id: String,
    pub event_id: String,
    pub conflicts: i64,
}

/// An `invoices` row: the event that announced the invoice.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Invoice {
    pub provider: String,
    pub invoice_id: String,
    pub event_id: String,
}

/// An `invoice_payments` row: the invoice a payment pays.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct InvoicePayment {
    pub provider: String,
    pub payment_id: String,
    pub invoice_id: String,
    pub event_id: String,
}

/// An `outbox` row; `position`: its rank in its stream (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    pub topic: String,
    pub dedupe_key: String,
    pub provider: String,
    pub event_id: String,
    pub payload: Value,
    pub position: i64,
    pub attempts: i32,
    pub requeued_attempts: i32,
    pub last_error: Option<String>,
    pub delivered: bool,
    pub dead: bool,
}

/// Reads every business table of `pool`'s database.
pub async fn snapshot(pool: &PgPool) -> Snapshot {
    let refs = |sql: &'static str| async move {
        sqlx::query_as::<_, (i64, String)>(sql)
            .fetch_all(pool)
            .await
            .unwrap()
            .into_iter()
            .collect::<HashMap<i64, String>>()
    };
    let entry_refs = refs(
        "select id, 'entry ' || provider || ' ' || kind || ' ' || source_ref from wallet_entries",
    )
    .await;
    let outbox_refs = refs("select id, 'outbox ' || topic || ' ' || dedupe_key from outbox").await;
    let named = |value: &mut Value| name_rows(value, &entry_refs, &outbox_refs);

    let events = sqlx::query_as::<
        _,
        (
            String,
            String,
            String,
            String,
            Value,
            Value,
            Option<i64>,
            String,
        ),
    >(
        "select provider, event_id, event_type, outcome, detail, payload,
                extract(epoch from provider_created_at)::bigint, received_via
         from processed_events order by provider, event_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(
        |(
            provider,
            event_id,
            event_type,
            outcome,
            mut detail,
            payload,
            provider_created_at,
            received_via,
        )| {
            named(&mut detail);
            Event {
                provider,
                event_id,
                event_type,
                outcome,
                detail,
                payload,
                provider_created_at,
                received_via,
            }
        },
    )
    .collect();

    let mut outbox: Vec<OutboxRow> = sqlx::query_as::<
        _,
        (
            String,
            String,
            String,
            String,
            Value,
            i32,
            i32,
            Option<String>,
            bool,
            bool,
        ),
    >(
        "select topic, dedupe_key, provider, event_id, payload, attempts, requeued_attempts,
                last_error, delivered_at is not null, dead_at is not null
         from outbox order by id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(
        |(
            topic,
            dedupe_key,
            provider,
            event_id,
            mut payload,
            attempts,
            requeued_attempts,
            last_error,
            delivered,
            dead,
        )| {
            named(&mut payload);
            OutboxRow {
                topic,
                dedupe_key,
                provider,
                event_id,
                payload,
                position: 0,
                attempts,
                requeued_attempts,
                last_error,
                delivered,
                dead,
            }
        },
    )
    .collect();
    let mut streams: HashMap<String, i64> = HashMap::new();
    for row in &mut outbox {
        let next = streams.entry(stream(row)).or_default();
        row.position = *next;
        *next += 1;
    }
    outbox.sort_by(|a, b| (&a.topic, &a.dedupe_key).cmp(&(&b.topic, &b.dedupe_key)));

    Snapshot {
        events,
        deferred: rows(
            pool,
            "select provider, event_id, waits_for from deferred_events order by provider, event_id",
        )
        .await,
        wallets: rows(
            pool,
            "select user_id, currency, balance_minor from wallets order by user_id, currency",
        )
        .await,
        entries: rows(
            pool,
            "select provider, kind, source_ref, user_id, currency, amount_minor, event_id, parent_ref,
                    row_number() over (partition by user_id, currency order by id) - 1 as position
             from wallet_entries order by provider, kind, source_ref",
        )
        .await,
        payments: rows(
            pool,
            "select provider, payment_id, payment_ref, user_id, amount_minor, currency, status,
                    refunded_minor, extract(epoch from provider_created_at)::bigint as provider_created_at,
                    event_id
             from payments order by provider, payment_id",
        )
        .await,
        subscriptions: rows(
            pool,
            "select provider, subscription_id, customer_id, user_id, status, plan_id,
                    extract(epoch from current_period_end)::bigint as current_period_end,
                    extract(epoch from provider_updated_at)::bigint as provider_updated_at,
                    event_id
             from subscriptions order by provider, subscription_id",
        )
        .await,
        owners: rows(
            pool,
            "select provider, subject, subject_id, user_id, event_id, conflicts
             from owners order by provider, subject, subject_id",
        )
        .await,
        invoices: rows(
            pool,
            "select provider, invoice_id, event_id from invoices order by provider, invoice_id",
        )
        .await,
        invoice_payments: rows(
            pool,
            "select provider, payment_id, invoice_id, event_id
             from invoice_payments order by provider, payment_id",
        )
        .await,
        outbox,
    }
}

async fn rows<T>(pool: &PgPool, sql: &'static str) -> Vec<T>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as::<_, T>(sql)
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The stream whose order a consumer sees (module docs).
pub(super) fn stream(row: &OutboxRow) -> String {
    let field = |name: &str| {
        row.payload
            .get(name)
            .map_or(String::new(), Value::to_string)
    };
    match row.topic.as_str() {
        "wallet.credited" | "wallet.debited" => {
            format!("wallet {} {}", field("user_id"), field("currency"))
        }
        "subscription.changed" => {
            format!("subscription {} {}", row.provider, field("subscription_id"))
        }
        _ => format!("{} {}", row.topic, row.dedupe_key),
    }
}

/// Replaces, at any depth of `value`, a number under a key ending in
/// `entry_id` or `outbox_id` by the natural key of the row it names.
fn name_rows(value: &mut Value, entries: &HashMap<i64, String>, outbox: &HashMap<i64, String>) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                let table = if key.ends_with("entry_id") {
                    Some(("entry", entries))
                } else if key.ends_with("outbox_id") {
                    Some(("outbox", outbox))
                } else {
                    None
                };
                match (table, field.as_i64()) {
                    (Some((what, ids)), Some(id)) => {
                        *field = ids
                            .get(&id)
                            .cloned()
                            .unwrap_or_else(|| format!("dangling {what}"))
                            .into();
                    }
                    _ => name_rows(field, entries, outbox),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                name_rows(item, entries, outbox);
            }
        }
        _ => {}
    }
}
