//! Razorpay has no events API: a sweep lists its payments and refunds
//! (`GET /v1/payments`, `GET /v1/refunds`, `from`/`to`, 100 a page, `skip`
//! to page, newest first) and gives each captured payment the effect of
//! `payment.captured` and each processed refund that of `refund.processed`,
//! through the same ingest path, under a synthetic event id:
//! `sweep:payment.captured:{pay_…}` and `sweep:refund.processed:{rfnd_…}`.
//!
//! The ledger's natural keys, `(razorpay, credit, pay_…)` and `(razorpay,
//! refund, rfnd_…)`, decide what is already applied: a payment credited by
//! its webhook, before or after the sweep, is never credited twice (the
//! later of the two is recorded `ignored` with the owner). Windows end at
//! least [`SETTLE_SECS`] in the past, so that offsets cannot shift while
//! pages are read; a window holding more than [`SLICE_ITEMS`] items is
//! split in two and read again.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::api::{Api, ApiFailure};
use super::{Checkpoint, Mode, Summary};
use crate::events::Outcome;
use crate::ledger::{self, EntryKind};
use crate::providers::is_identifier;
use crate::providers::razorpay::{PROVIDER, listed_event};

/// Said when Razorpay refuses the key.
pub const UNAUTHORIZED_HINT: &str = "check RAZORPAY_KEY_ID and RAZORPAY_KEY_SECRET";

/// How far back a periodic sweep reaches: Razorpay retries a delivery for
/// 24 hours, then disables the webhook.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// A window's end is at least this many seconds in the past.
pub const SETTLE_SECS: i64 = 60;

/// Most items (payments and refunds) held in memory at once.
pub const SLICE_ITEMS: usize = 5_000;

const PAGE: usize = 100;

#[derive(Deserialize)]
struct Collection {
    items: Vec<Value>,
}

/// Sweeps `[since, until)` (Unix seconds; `until` is moved back to
/// [`SETTLE_SECS`] before `now` when later). Dry runs count; imports are
/// not supported (Razorpay lists no events to import).
pub async fn sweep(
    api: &mut Api,
    pool: &PgPool,
    mode: Mode,
    (since, until): (i64, i64),
    checkpoint: Option<&Checkpoint>,
) -> anyhow::Result<Summary> {
    let requests_before = api.requests;
    anyhow::ensure!(
        mode != Mode::Import,
        "Razorpay lists payments, not events: use `webhookd import --provider razorpay --from-csv`"
    );
    let mut summary = Summary::new(PROVIDER, mode, (since, until));
    let mut slices = super::slices((since, until));
    while let Some((from, to)) = slices.pop() {
        let listed = match list(api, "/v1/payments", from, to, &mut summary).await? {
            Some(payments) => list(api, "/v1/refunds", from, to, &mut summary)
                .await?
                .map(|refunds| (payments, refunds)),
            None => None,
        };
        let Some((payments, refunds)) = listed else {
            let middle = from + (to - from) / 2;
            slices.push((middle, to));
            slices.push((from, middle));
            continue;
        };
        summary.listed += (payments.len() + refunds.len()) as u64;
        let mut sweep = Slice {
            api: &mut *api,
            pool,
            mode,
            summary: &mut summary,
            payments: HashMap::new(),
        };
        sweep.payments(payments).await?;
        sweep.refunds(refunds).await?;
        if let Some(checkpoint) = checkpoint {
            checkpoint.advance(pool, PROVIDER, to).await?;
        }
    }
    summary.requests = api.requests - requests_before;
    Ok(summary)
}

/// Every item of `path` created in `[from, to)`, oldest first, or `None`
/// when there are more than [`SLICE_ITEMS`] and the window can be split.
async fn list(
    api: &mut Api,
    path: &str,
    from: i64,
    to: i64,
    summary: &mut Summary,
) -> Result<Option<Vec<Value>>, ApiFailure> {
    let mut items: Vec<Value> = Vec::new();
    loop {
        let query = [
            ("from", from.to_string()),
            // Razorpay's `to` is inclusive.
            ("to", (to - 1).to_string()),
            ("count", PAGE.to_string()),
            ("skip", items.len().to_string()),
        ];
        let body = api.get(path, &query).await?;
        summary.pages += 1;
        let page: Collection = serde_json::from_slice(&body)
            .map_err(|e| ApiFailure::Malformed(format!("a collection: {e}"), PROVIDER))?;
        let got = page.items.len();
        for item in page.items {
            match item.get("created_at").and_then(Value::as_i64) {
                Some(at) if (from..to).contains(&at) => items.push(item),
                _ => {
                    return Err(ApiFailure::Malformed(
                        format!("an item without created_at in [{from}, {to})"),
                        PROVIDER,
                    ));
                }
            }
        }
        if got < PAGE {
            items.sort_by_key(|item| (created_at(item), id(item).unwrap_or_default().to_owned()));
            return Ok(Some(items));
        }
        if items.len() > SLICE_ITEMS && to - from > 1 {
            return Ok(None);
        }
        if items.len() > SLICE_ITEMS * 20 {
            return Err(ApiFailure::Malformed(
                format!("more than {} items in one second", SLICE_ITEMS * 20),
                PROVIDER,
            ));
        }
    }
}

/// One window's payments and refunds being applied.
struct Slice<'a> {
    api: &'a mut Api,
    pool: &'a PgPool,
    mode: Mode,
    summary: &'a mut Summary,
    /// The window's payments (and those fetched for its refunds), by id.
    payments: HashMap<String, Value>,
}

impl Slice<'_> {
    /// Credits each captured payment whose credit is not in the ledger.
    async fn payments(&mut self, payments: Vec<Value>) -> anyhow::Result<()> {
        let captured: Vec<Value> = payments
            .into_iter()
            .filter(|p| {
                let usable = id(p).is_some() && is_captured(p);
                if !usable {
                    // Failed, authorized-only, or unreadable: no credit to apply.
                    self.summary.skipped += 1;
                }
                usable
            })
            .collect();
        let ids: Vec<String> = captured
            .iter()
            .filter_map(|p| id(p).map(str::to_owned))
            .collect();
        let credited = ledger::existing(self.pool, PROVIDER, EntryKind::Credit, &ids).await?;
        for payment in captured {
            let pay_id = id(&payment).unwrap_or_default().to_owned();
            self.payments.insert(pay_id.clone(), payment.clone());
            if credited.contains(&pay_id) {
                self.summary.already_seen += 1;
                continue;
            }
            let created = payment.get("created_at").and_then(Value::as_i64);
            self.apply(
                "payment.captured",
                &pay_id,
                created,
                json!({ "payment": { "entity": payment } }),
            )
            .await?;
        }
        Ok(())
    }

    /// Debits each processed refund not in the ledger, crediting its payment
    /// first when that was never credited (fetched when outside the window).
    async fn refunds(&mut self, refunds: Vec<Value>) -> anyhow::Result<()> {
        let processed: Vec<Value> = refunds
            .into_iter()
            .filter(|r| {
                let usable =
                    id(r).is_some() && r.get("status").and_then(Value::as_str) == Some("processed");
                if !usable {
                    self.summary.skipped += 1;
                }
                usable
            })
            .collect();
        let ids: Vec<String> = processed
            .iter()
            .filter_map(|r| id(r).map(str::to_owned))
            .collect();
        let debited = ledger::existing(self.pool, PROVIDER, EntryKind::Refund, &ids).await?;
        for refund in processed {
            let refund_id = id(&refund).unwrap_or_default().to_owned();
            if debited.contains(&refund_id) {
                self.summary.already_seen += 1;
                continue;
            }
            let payment_id = refund
                .get("payment_id")
                .and_then(Value::as_str)
                .filter(|p| is_identifier(p));
            let mut payload = json!({ "refund": { "entity": refund } });
            if let Some(payment_id) = payment_id
                && let Some(payment) = self.payment(payment_id).await?
            {
                payload["payment"] = json!({ "entity": payment });
            }
            let created = payload
                .pointer("/refund/entity/created_at")
                .and_then(Value::as_i64);
            self.apply("refund.processed", &refund_id, created, payload)
                .await?;
        }
        Ok(())
    }

    /// The payment `payment_id`, credited first if it never was: from the
    /// window, else fetched (`GET /v1/payments/:id`).
    async fn payment(&mut self, payment_id: &str) -> anyhow::Result<Option<Value>> {
        if let Some(payment) = self.payments.get(payment_id) {
            return Ok(Some(payment.clone()));
        }
        let credited = ledger::existing(
            self.pool,
            PROVIDER,
            EntryKind::Credit,
            &[payment_id.to_owned()],
        )
        .await?;
        if !credited.is_empty() {
            return Ok(None);
        }
        let body = self
            .api
            .get(&format!("/v1/payments/{payment_id}"), &[])
            .await?;
        let payment: Value = serde_json::from_slice(&body)
            .map_err(|e| ApiFailure::Malformed(format!("a payment: {e}"), PROVIDER))?;
        if id(&payment) != Some(payment_id) {
            anyhow::bail!(ApiFailure::Malformed(
                "another payment than asked for".into(),
                PROVIDER
            ));
        }
        self.payments.insert(payment_id.to_owned(), payment.clone());
        if is_captured(&payment) {
            self.summary.listed += 1;
            let created = payment.get("created_at").and_then(Value::as_i64);
            self.apply(
                "payment.captured",
                payment_id,
                created,
                json!({ "payment": { "entity": payment } }),
            )
            .await?;
        }
        Ok(Some(payment))
    }

    /// Applies (or counts) one synthetic event, created when its entity was.
    async fn apply(
        &mut self,
        event: &str,
        entity_id: &str,
        created: Option<i64>,
        payload: Value,
    ) -> anyhow::Result<()> {
        if self.mode == Mode::DryRun {
            self.summary.recovered += 1;
            return Ok(());
        }
        let contains: Vec<&String> = payload
            .as_object()
            .map(|p| p.keys().collect())
            .unwrap_or_default();
        let body = json!({
            "entity": "event", "event": event, "contains": contains,
            "payload": payload, "created_at": created,
        });
        let event_id = format!("sweep:{event}:{entity_id}");
        let event = match listed_event(&Bytes::from(body.to_string()), &event_id) {
            Ok(event) => event,
            Err(refusal) => {
                tracing::warn!(%refusal, "Razorpay listed an entity webhookd cannot read; skipped");
                self.summary.skipped += 1;
                return Ok(());
            }
        };
        match super::apply_one(self.pool, &event).await? {
            Outcome::Processed | Outcome::Deferred => self.summary.recovered += 1,
            Outcome::Duplicate | Outcome::Ignored => self.summary.already_seen += 1,
            Outcome::Rejected | Outcome::Superseded => self.summary.skipped += 1,
        }
        Ok(())
    }
}

fn id(item: &Value) -> Option<&str> {
    item.get("id")
        .and_then(Value::as_str)
        .filter(|id| is_identifier(id))
}

fn created_at(item: &Value) -> i64 {
    item.get("created_at")
        .and_then(Value::as_i64)
        .unwrap_or_default()
}

/// Captured, and possibly refunded since.
fn is_captured(payment: &Value) -> bool {
    matches!(
        payment.get("status").and_then(Value::as_str),
        Some("captured" | "refunded")
    )
}
