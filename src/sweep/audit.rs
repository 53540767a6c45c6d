//! `webhookd reconcile --against stripe|razorpay`: the provider's succeeded
//! payments of a window and their refunds, compared payment by payment,
//! and per `(user, currency)`, with the ledger's entries of that provider.
//! A payment's owner is read by the default rule (Stripe: `metadata.user_id`,
//! else the owner a Checkout Session taught for it; Razorpay: `notes.user_id`,
//! else its order's), its learned owners as webhookd learned them; a
//! payment that pays an invoice is the invoice's, never a wallet's.
//!
//! - **missing**: the provider took the money, the ledger has no credit
//!   (one whose owner no event ever named is waiting for it: `no owner`);
//! - **mismatched**: credited to another user, currency or amount, or
//!   refunded by another amount than the provider says;
//! - **extra**: a credit made in the window whose payment the provider does
//!   not report as succeeded.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use sqlx::PgPool;

use crate::api::{Api, ApiFailure};
use crate::effects::{self, Owing};
use crate::ledger::{self, Credited};
use crate::providers::is_identifier;
use crate::{invoices, owners};

/// A payment as the provider reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paid {
    pub id: String,
    pub user_id: String,
    pub currency: String,
    pub amount_minor: i64,
    pub refunded_minor: i64,
}

/// The JSON line `reconcile --against` prints.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub provider: &'static str,
    pub since: i64,
    pub until: i64,
    /// Succeeded payments with an owner that the provider listed.
    pub payments: u64,
    pub matched: u64,
    pub missing: u64,
    pub mismatched: u64,
    pub extra: u64,
    /// `(user, currency)` pairs whose totals differ.
    pub users_mismatched: u64,
    pub requests: u64,
    /// One line per finding, for the operator.
    #[serde(skip)]
    pub findings: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.missing + self.mismatched + self.extra == 0
    }
}

/// How one provider's payments are audited: which list, which statuses
/// count as paid and as refunded, how webhookd credits a payment.
struct Audited {
    provider: &'static str,
    /// The payments' list, and the path a payment's own status is read at.
    payments: &'static str,
    paid: &'static [&'static str],
    /// How webhookd reads a paid payment (the effects' own reading).
    owing: fn(&Value) -> Result<Owing, effects::Reason>,
    /// Where a refund names its payment, and the statuses that debit it.
    refund_parent: &'static str,
    refunded: &'static [&'static str],
    /// The status `compare` expects of a payment the ledger credited.
    succeeded: &'static str,
    list: Listing,
}

/// Stripe: `GET /v1/payment_intents` and `GET /v1/refunds` of the window.
pub async fn stripe(api: &mut Api, pool: &PgPool, window: (i64, i64)) -> anyhow::Result<Report> {
    let stripe = Audited {
        provider: crate::providers::stripe::PROVIDER,
        payments: "/v1/payment_intents",
        paid: &["succeeded"],
        owing: effects::stripe::payment_intent_owing,
        refund_parent: "/payment_intent",
        // A charge's amount_refunded, which the ledger debits, counts
        // pending refunds too.
        refunded: &["succeeded", "pending"],
        succeeded: "succeeded",
        list: Listing::Stripe,
    };
    audit(api, pool, &stripe, window).await
}

/// Razorpay: `GET /v1/payments` and `GET /v1/refunds` of the window.
pub async fn razorpay(api: &mut Api, pool: &PgPool, window: (i64, i64)) -> anyhow::Result<Report> {
    let razorpay = Audited {
        provider: crate::providers::razorpay::PROVIDER,
        payments: "/v1/payments",
        paid: &["captured", "refunded"],
        owing: effects::razorpay::payment_owing,
        refund_parent: "/payment_id",
        refunded: &["processed"],
        succeeded: "captured",
        list: Listing::Razorpay,
    };
    audit(api, pool, &razorpay, window).await
}

async fn audit(
    api: &mut Api,
    pool: &PgPool,
    audited: &Audited,
    (since, until): (i64, i64),
) -> anyhow::Result<Report> {
    let payments = audited
        .list
        .all(api, audited.payments, since, until)
        .await?;
    let owing: Vec<Owing> = payments
        .iter()
        .filter(|p| {
            let status = p.get("status").and_then(Value::as_str);
            status.is_some_and(|status| audited.paid.contains(&status))
        })
        .filter_map(|p| (audited.owing)(p).ok())
        .collect();
    let mut paid = owed_to_wallets(pool, audited.provider, owing).await?;
    let refunds = audited.list.all(api, "/v1/refunds", since, until).await?;
    add_refunds(&mut paid, refunds, audited.refund_parent, audited.refunded);
    compare(
        api,
        pool,
        audited.provider,
        paid,
        (since, until),
        audited.payments,
        audited.succeeded,
    )
    .await
}

/// How a provider pages its lists.
#[derive(Debug, Clone, Copy)]
enum Listing {
    Stripe,
    Razorpay,
}

impl Listing {
    /// Every object of the list at `path` created in `[since, until)`.
    async fn all(
        self,
        api: &mut Api,
        path: &str,
        since: i64,
        until: i64,
    ) -> Result<Vec<Value>, ApiFailure> {
        match self {
            Listing::Stripe => stripe_list(api, path, since, until).await,
            Listing::Razorpay => razorpay_list(api, path, since, until).await,
        }
    }
}

/// The succeeded payments `owing` as webhookd credits them (the effects'
/// own reading, so the audit never restates the rule): to the owner named
/// on each, else to the one learned for it (`owners::resolve`), else to
/// nobody yet ([`NO_OWNER`]: a credit that waits). A payment that pays an
/// invoice is left out: it is never a wallet's.
async fn owed_to_wallets(
    pool: &PgPool,
    provider: &str,
    owing: Vec<Owing>,
) -> Result<Vec<Paid>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let mut paid = Vec::with_capacity(owing.len());
    for payment in owing {
        let credit = match payment.named() {
            Some(credit) => credit,
            None => {
                let id = &payment.owed.source_ref;
                if payment.invoice.is_some()
                    || invoices::paid_by(&mut conn, provider, id).await?.is_some()
                {
                    continue;
                }
                let learned = owners::resolve(&mut conn, provider, &payment.candidates).await?;
                payment
                    .owed
                    .to(learned.unwrap_or_else(|| NO_OWNER.to_owned()))
            }
        };
        paid.push(Paid {
            id: credit.source_ref,
            user_id: credit.user_id,
            currency: credit.currency,
            amount_minor: credit.amount_minor,
            refunded_minor: 0,
        });
    }
    Ok(paid)
}

/// The owner of a paid payment no event has named one for (it waits).
const NO_OWNER: &str = "(no owner)";

/// Adds each `status` refund's amount to the payment it names at `parent`.
fn add_refunds(paid: &mut [Paid], refunds: Vec<Value>, parent: &str, statuses: &[&str]) {
    let index: HashMap<String, usize> = paid
        .iter()
        .enumerate()
        .map(|(i, p)| (p.id.clone(), i))
        .collect();
    for refund in refunds {
        let done = refund
            .get("status")
            .and_then(Value::as_str)
            .is_some_and(|status| statuses.contains(&status));
        let of = refund
            .pointer(parent)
            .and_then(Value::as_str)
            .and_then(|id| index.get(id));
        if let (true, Some(&at), Some(amount)) =
            (done, of, refund.get("amount").and_then(Value::as_i64))
        {
            paid[at].refunded_minor += amount;
        }
    }
}

async fn compare(
    api: &mut Api,
    pool: &PgPool,
    provider: &'static str,
    paid: Vec<Paid>,
    (since, until): (i64, i64),
    retrieve: &str,
    succeeded: &str,
) -> anyhow::Result<Report> {
    let mut report = Report {
        provider,
        since,
        until,
        payments: paid.len() as u64,
        ..Report::default()
    };
    let ids: Vec<String> = paid.iter().map(|p| p.id.clone()).collect();
    let credited: HashMap<String, Credited> =
        ledger::credits_for_audit(pool, provider, &ids, since, until)
            .await?
            .into_iter()
            .map(|c| (c.source_ref.clone(), c))
            .collect();
    for p in &paid {
        report.check_payment(p, credited.get(&p.id));
    }
    // Credits of the window the listing did not show: a payment made before
    // the window is fine; one the provider does not report succeeded is not.
    let listed: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    for c in credited
        .values()
        .filter(|c| !listed.contains(c.source_ref.as_str()))
    {
        let status = status(api, &format!("{retrieve}/{}", c.source_ref)).await?;
        report.check_unlisted(c, status.as_deref(), succeeded);
    }
    report.check_nets(nets(&paid, &credited));
    report.requests = api.requests;
    Ok(report)
}

impl Report {
    /// Counts `p` as matched, missing (no `credit`) or mismatched.
    fn check_payment(&mut self, p: &Paid, credit: Option<&Credited>) {
        let provider = self.provider;
        let Some(c) = credit else {
            self.missing += 1;
            self.findings.push(format!(
                "MISSING {provider} {}: {} {} to {} succeeded, never credited",
                p.id, p.amount_minor, p.currency, p.user_id
            ));
            return;
        };
        let same = (
            c.user_id.as_str(),
            c.currency.as_str(),
            c.amount_minor,
            c.refunded_minor,
        ) == (
            p.user_id.as_str(),
            p.currency.as_str(),
            p.amount_minor,
            p.refunded_minor,
        );
        if same {
            self.matched += 1;
        } else {
            self.mismatched += 1;
            self.findings.push(format!(
                "MISMATCH {provider} {}: {provider} says {} {} to {} refunded {}; the ledger has {} {} to {} refunded {}",
                p.id, p.amount_minor, p.currency, p.user_id, p.refunded_minor,
                c.amount_minor, c.currency, c.user_id, c.refunded_minor
            ));
        }
    }

    /// Counts credit `c`, which the listing did not show, as extra unless
    /// the provider reports its payment (`status`) as `succeeded` or
    /// refunded.
    fn check_unlisted(&mut self, c: &Credited, status: Option<&str>, succeeded: &str) {
        let provider = self.provider;
        let reported = status.is_some_and(|s| s == succeeded || s == "refunded");
        if !reported {
            self.extra += 1;
            self.findings.push(format!(
                "EXTRA {provider} {}: credited {} {} to {}, but {provider} reports it as {}",
                c.source_ref,
                c.amount_minor,
                c.currency,
                c.user_id,
                status.unwrap_or("unknown")
            ));
        }
    }

    /// Counts each `(user, currency)` whose nets differ.
    fn check_nets(&mut self, nets: BTreeMap<(String, String), (i64, i64)>) {
        let provider = self.provider;
        for ((user, currency), (theirs, ours)) in nets {
            if theirs != ours {
                self.users_mismatched += 1;
                self.findings.push(format!(
                    "USER {user} {currency}: {provider} nets {theirs}, the ledger {ours}"
                ));
            }
        }
    }
}

/// Net per `(user, currency)`: what the provider says of `paid`, and what
/// the ledger has of their credits.
fn nets(
    paid: &[Paid],
    credited: &HashMap<String, Credited>,
) -> BTreeMap<(String, String), (i64, i64)> {
    let mut nets: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
    for p in paid {
        nets.entry((p.user_id.clone(), p.currency.clone()))
            .or_default()
            .0 += p.amount_minor - p.refunded_minor;
        if let Some(c) = credited.get(&p.id) {
            let key = (c.user_id.clone(), c.currency.clone());
            nets.entry(key).or_default().1 += c.amount_minor - c.refunded_minor;
        }
    }
    nets
}

/// The status of the object at `path` (`None` when the provider refuses to
/// say, as for an id it does not know).
async fn status(api: &mut Api, path: &str) -> Result<Option<String>, ApiFailure> {
    match api.get(path, &[]).await {
        Ok(body) => Ok(serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("status").and_then(Value::as_str).map(str::to_owned))),
        Err(ApiFailure::Refused { .. }) => Ok(None),
        Err(failure) => Err(failure),
    }
}

#[derive(Deserialize)]
struct StripePage {
    data: Vec<Box<RawValue>>,
    has_more: bool,
}

/// Every object of a Stripe list created in `[since, until)`.
async fn stripe_list(
    api: &mut Api,
    path: &str,
    since: i64,
    until: i64,
) -> Result<Vec<Value>, ApiFailure> {
    let mut all: Vec<Value> = Vec::new();
    loop {
        let mut query = vec![
            ("created[gte]", since.to_string()),
            ("created[lt]", until.to_string()),
            ("limit", "100".to_owned()),
        ];
        if let Some(last) = all.last().and_then(ident) {
            query.push(("starting_after", last.to_owned()));
        }
        let body = api.get(path, &query).await?;
        let page: StripePage = serde_json::from_slice(&body)
            .map_err(|e| ApiFailure::Malformed(format!("a list page: {e}"), "stripe"))?;
        let got = page.data.len();
        for raw in page.data {
            all.push(
                serde_json::from_str(raw.get())
                    .map_err(|e| ApiFailure::Malformed(e.to_string(), "stripe"))?,
            );
        }
        if !page.has_more || got == 0 {
            return Ok(all);
        }
    }
}

#[derive(Deserialize)]
struct Collection {
    items: Vec<Value>,
}

/// Every item of a Razorpay collection created in `[since, until)`.
async fn razorpay_list(
    api: &mut Api,
    path: &str,
    since: i64,
    until: i64,
) -> Result<Vec<Value>, ApiFailure> {
    let mut all: Vec<Value> = Vec::new();
    loop {
        let query = [
            ("from", since.to_string()),
            ("to", (until - 1).to_string()),
            ("count", "100".to_owned()),
            ("skip", all.len().to_string()),
        ];
        let body = api.get(path, &query).await?;
        let page: Collection = serde_json::from_slice(&body)
            .map_err(|e| ApiFailure::Malformed(format!("a collection: {e}"), "razorpay"))?;
        let got = page.items.len();
        all.extend(page.items);
        if got < 100 {
            return Ok(all);
        }
    }
}

fn ident(object: &Value) -> Option<&str> {
    object
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| is_identifier(id))
}
