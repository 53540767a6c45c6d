//! Razorpay has no events API: a sweep lists its payments and refunds
//! (`GET /v1/payments`, `GET /v1/refunds`, `from`/`to`, 100 a page, `skip`
//! to page, newest first) and gives each captured payment the effect of
//! `payment.captured` and each processed refund that of `refund.processed`,
//! through the same ingest path, under an event id of webhookd's own
//! namespace, which no delivery can name ([`crate::providers::is_own_id`]):
//! `webhookd:sweep:payment.captured:{pay_…}` and
//! `webhookd:sweep:refund.processed:{rfnd_…}`. (Sweeps before that
//! namespace named them `sweep:…`, an id a delivery could take first;
//! the ledger decides, so those are never applied twice either.)
//!
//! The ledger's natural keys, `(razorpay, credit, pay_…)` and `(razorpay,
//! refund, rfnd_…)`, decide what is missing, never the synthetic id: a
//! payment credited by its webhook, before or after the sweep, is never
//! credited twice (the later of the two is recorded `ignored` with the
//! owner). Windows end at least [`SETTLE_SECS`] in the past, so that
//! offsets cannot shift while pages are read; a window holding more items
//! or bytes than a slice holds ([`listing::split_at`]) is split in two and
//! read again. Items are held as listed and parsed one at a time.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use serde_json::value::RawValue;
use sqlx::PgPool;

use super::listing;
use super::{Checkpoint, Mode, Summary, Swept};
use crate::api::{Api, ApiFailure};
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

/// The prefix of the event ids a Razorpay sweep gives what it applies.
pub const SWEEP_ID_PREFIX: &str = "webhookd:sweep:";

const PAGE: usize = 100;

mod items;
use items::{CAPTURED, Collection, Item, REFUNDED};

/// Sweeps `[since, until)` (Unix seconds; `until` is moved back to
/// [`SETTLE_SECS`] before `now` when later). Dry runs count; imports are
/// not supported (Razorpay lists no events to import). What it applies is
/// judged as `source` would its deliveries ([`Swept::judge`]).
pub async fn sweep(
    api: &mut Api,
    pool: &PgPool,
    mode: Mode,
    source: &Swept,
    (since, until): (i64, i64),
    checkpoint: Option<&Checkpoint>,
) -> anyhow::Result<Summary> {
    let requests_before = api.requests;
    anyhow::ensure!(
        mode != Mode::Import,
        "Razorpay lists payments, not events: use `webhookd import --provider razorpay --from-csv`"
    );
    let mut summary = Summary::new(PROVIDER, None, mode, (since, until));
    let mut slices = super::slices((since, until));
    while let Some((from, to)) = slices.pop() {
        let listed = match list(api, "/v1/payments", (from, to), 0, &mut summary).await? {
            Some(payments) => {
                let held = payments.iter().map(|p| p.raw.get().len()).sum();
                list(api, "/v1/refunds", (from, to), held, &mut summary)
                    .await?
                    .map(|refunds| (payments, refunds))
            }
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
            source,
            summary: &mut summary,
            payments: HashMap::new(),
        };
        sweep.payments(payments).await?;
        sweep.refunds(refunds).await?;
        if let Some(checkpoint) = checkpoint {
            checkpoint.advance(pool, to).await?;
        }
    }
    summary.requests = api.requests - requests_before;
    Ok(summary)
}

/// Every item of `path` created in `[from, to)`, oldest first, or `None`
/// when they are more than a slice holds beside the `held` bytes already
/// read, and the window can be split ([`listing::split_at`]).
async fn list(
    api: &mut Api,
    path: &str,
    (from, to): (i64, i64),
    held: usize,
    summary: &mut Summary,
) -> Result<Option<Vec<Item>>, ApiFailure> {
    let mut items: Vec<Item> = Vec::new();
    let mut bytes = held;
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
        listing::page_of(got, PAGE, PROVIDER)?;
        for raw in page.items {
            let item = Item::read(raw)?;
            match item.created_at() {
                Some(at) if (from..to).contains(&at) => {
                    bytes += item.raw.get().len();
                    items.push(item);
                }
                _ => {
                    return Err(ApiFailure::Malformed(
                        format!("an item without created_at in [{from}, {to})"),
                        PROVIDER,
                    ));
                }
            }
        }
        if got < PAGE {
            items.sort_by(|a, b| {
                (a.created_at(), a.id().unwrap_or_default())
                    .cmp(&(b.created_at(), b.id().unwrap_or_default()))
            });
            return Ok(Some(items));
        }
        if listing::split_at(items.len(), bytes, (from, to), PROVIDER)? {
            return Ok(None);
        }
    }
}

/// One window's payments and refunds being applied.
struct Slice<'a> {
    api: &'a mut Api,
    pool: &'a PgPool,
    mode: Mode,
    source: &'a Swept,
    summary: &'a mut Summary,
    /// The window's payments (and those fetched for its refunds), by id.
    payments: HashMap<String, Box<RawValue>>,
}

impl Slice<'_> {
    /// Credits each captured payment whose credit is not in the ledger.
    async fn payments(&mut self, payments: Vec<Item>) -> anyhow::Result<()> {
        let captured: Vec<Item> = payments
            .into_iter()
            .filter(|p| {
                let usable = p.id().is_some() && p.is_captured();
                if !usable {
                    // Failed, authorized-only, or unreadable: no credit to apply.
                    self.summary.skipped += 1;
                }
                usable
            })
            .collect();
        let ids: Vec<String> = captured
            .iter()
            .filter_map(|p| p.id().map(str::to_owned))
            .collect();
        let credited = ledger::existing(self.pool, PROVIDER, EntryKind::Credit, &ids).await?;
        for payment in captured {
            let pay_id = payment.id().unwrap_or_default().to_owned();
            if credited.contains(&pay_id) {
                self.summary.already_seen += 1;
            } else {
                self.apply(CAPTURED, &payment, None).await?;
            }
            self.payments.insert(pay_id, payment.raw);
        }
        Ok(())
    }

    /// Debits each processed refund not in the ledger, crediting its payment
    /// first when that was never credited (fetched when outside the window).
    async fn refunds(&mut self, refunds: Vec<Item>) -> anyhow::Result<()> {
        let processed: Vec<Item> = refunds
            .into_iter()
            .filter(|r| {
                let usable = r.id().is_some() && r.status() == Some("processed");
                if !usable {
                    self.summary.skipped += 1;
                }
                usable
            })
            .collect();
        let ids: Vec<String> = processed
            .iter()
            .filter_map(|r| r.id().map(str::to_owned))
            .collect();
        let debited = ledger::existing(self.pool, PROVIDER, EntryKind::Refund, &ids).await?;
        for refund in processed {
            if debited.contains(refund.id().unwrap_or_default()) {
                self.summary.already_seen += 1;
                continue;
            }
            let payment_id = refund
                .head
                .payment_id
                .as_str()
                .filter(|p| is_identifier(p))
                .map(str::to_owned);
            let payment = match payment_id {
                Some(payment_id) => self.payment(&payment_id).await?,
                None => None,
            };
            self.apply(REFUNDED, &refund, payment.as_deref()).await?;
        }
        Ok(())
    }

    /// The payment `payment_id`, credited first if it never was: from the
    /// window, else fetched (`GET /v1/payments/:id`). `None` when it was
    /// credited before (the refund then needs only its own entity).
    async fn payment(&mut self, payment_id: &str) -> anyhow::Result<Option<Box<RawValue>>> {
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
        let raw: Box<RawValue> = serde_json::from_slice(&body)
            .map_err(|e| ApiFailure::Malformed(format!("a payment: {e}"), PROVIDER))?;
        let payment = Item::read(raw)?;
        if payment.id() != Some(payment_id) {
            anyhow::bail!(ApiFailure::Malformed(
                "another payment than asked for".into(),
                PROVIDER
            ));
        }
        if payment.is_captured() {
            self.summary.listed += 1;
            self.apply(CAPTURED, &payment, None).await?;
        }
        self.payments
            .insert(payment_id.to_owned(), payment.raw.clone());
        Ok(Some(payment.raw))
    }

    /// Applies (or counts) the synthetic `event` of `item`, created when
    /// it was: a payment's [`CAPTURED`], or a refund's [`REFUNDED`] with
    /// its `payment` when given.
    async fn apply(
        &mut self,
        event: &'static str,
        item: &Item,
        payment: Option<&RawValue>,
    ) -> anyhow::Result<()> {
        if self.mode == Mode::DryRun {
            self.summary.recovered += 1;
            return Ok(());
        }
        let body = items::envelope(event, item, payment)?;
        let event_id = format!("{SWEEP_ID_PREFIX}{event}:{}", item.id().unwrap_or_default());
        let event = match listed_event(&Bytes::from(body), &event_id) {
            Ok(event) => self.source.judge(event),
            Err(refusal) => {
                tracing::warn!(%refusal, "Razorpay listed an entity webhookd cannot read; skipped");
                self.summary.skipped += 1;
                return Ok(());
            }
        };
        let outcome = super::apply_one(self.pool, &event).await?;
        self.summary.count(outcome);
        Ok(())
    }
}
