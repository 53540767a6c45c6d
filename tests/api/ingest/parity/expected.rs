//! What a history ends in whatever the order its events arrived in, read
//! from its events alone (not from the plan, so that it checks the
//! generator too, and holds for a history cut short):
//! - each Checkout intent (`pi_cs…`) is credited at most once, to the
//!   owner its session names, by the session's amount, or not at all when
//!   it pays an invoice, failed, or no event ever names its owner; its
//!   refunds debit the largest cumulative refund, within the credit; the
//!   buyers' wallets hold exactly that;
//! - after every event arrived, the only events still waiting are refunds
//!   of payments no event of the history pays (not an invoice's: nothing
//!   credits those, so their refunds have nothing to wait for), and
//!   payments whose owner no event of the history names (those the owner
//!   wait expires);
//! - a Checkout subscription has its customer's owner once one is taught;
//! - no Checkout event is rejected.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::Value;
use sqlx::PgPool;
use webhookd::providers::Event;

use super::history::{History, Owners, paid_session};

/// A credit: owner, currency (as the ledger spells it), amount.
type Credit = (String, String, i64);

#[derive(Debug, PartialEq)]
struct Expected {
    credits: BTreeMap<String, Credit>,
    debited: BTreeMap<String, i64>,
    wallets: BTreeMap<(String, String), i64>,
    /// `(provider, event_id, waits_for)`.
    deferred: BTreeSet<(String, String, String)>,
}

fn checkout_intent(pi: &str) -> bool {
    pi.starts_with("pi_cs")
}

fn expected(history: &History) -> Expected {
    let mut seen = HashSet::new();
    let events: Vec<&Event> = history
        .events
        .iter()
        .filter(|event| seen.insert((event.provider(), event.event_id())))
        .collect();
    let owners = Owners::of(&events);
    let payment_owner = |pi: &str| {
        let claimed = owners.claimed.get(&format!("payment {pi}"))?;
        claimed.iter().next().copied()
    };
    // Every payment some event credits (Stripe's intents, Razorpay's
    // payments), with its credit.
    let mut credited: HashMap<(&str, &str), Credit> = HashMap::new();
    for &event in &events {
        let object = event.object();
        let str_at = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        let int_at = |pointer: &str| object.pointer(pointer).and_then(Value::as_i64);
        let currency = |pointer: &str| str_at(pointer).map(str::to_ascii_uppercase);
        let credit = match (event.provider(), event.event_type()) {
            ("stripe", "payment_intent.succeeded") => {
                let pi = str_at("/id").unwrap_or_default();
                let owner = str_at("/metadata/user_id").or_else(|| {
                    let linked = str_at("/invoice").is_some() || owners.invoices.contains_key(pi);
                    payment_owner(pi).filter(|_| !linked)
                });
                owner.map(|owner| (pi, owner, currency("/currency"), int_at("/amount_received")))
            }
            ("stripe", kind) if kind.starts_with("checkout.session.") => {
                paid_session(event).map(|pi| {
                    let owner = str_at("/client_reference_id").unwrap_or_default();
                    (pi, owner, currency("/currency"), int_at("/amount_total"))
                })
            }
            ("razorpay", "payment.captured") => str_at("/payment/entity/id").map(|id| {
                let owner = str_at("/payment/entity/notes/user_id").unwrap_or_default();
                (
                    id,
                    owner,
                    currency("/payment/entity/currency"),
                    int_at("/payment/entity/amount"),
                )
            }),
            _ => None,
        };
        if let Some((payment, owner, Some(currency), Some(amount))) = credit {
            let credit = (owner.to_owned(), currency, amount);
            credited
                .entry((event.provider(), payment))
                .or_insert(credit);
        }
    }

    let mut expected = Expected {
        credits: BTreeMap::new(),
        debited: BTreeMap::new(),
        wallets: BTreeMap::new(),
        deferred: BTreeSet::new(),
    };
    for ((_, pi), credit) in credited
        .iter()
        .filter(|((p, pi), _)| *p == "stripe" && checkout_intent(pi))
    {
        expected.credits.insert((*pi).to_owned(), credit.clone());
    }
    let mut defer = |event: &Event, waits_for: &str| {
        let row = (event.provider(), event.event_id(), waits_for);
        expected
            .deferred
            .insert((row.0.to_owned(), row.1.to_owned(), row.2.to_owned()));
    };
    let mut largest_refund: BTreeMap<&str, i64> = BTreeMap::new();
    for &event in &events {
        let object = event.object();
        let str_at = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        match (event.provider(), event.event_type()) {
            ("stripe", "charge.refunded") => {
                let Some(pi) = str_at("/payment_intent") else {
                    continue;
                };
                // An invoice's intent is credited to no wallet: its refund
                // has nothing to wait for.
                let linked = owners.invoices.contains_key(pi);
                if !credited.contains_key(&("stripe", pi)) {
                    if !linked {
                        defer(event, pi);
                    }
                } else if checkout_intent(pi) {
                    let refunded = object["amount_refunded"].as_i64().unwrap_or_default();
                    let largest = largest_refund.entry(pi).or_default();
                    *largest = (*largest).max(refunded);
                }
            }
            ("razorpay", "refund.processed") => {
                if let Some(payment) = str_at("/refund/entity/payment_id")
                    && !credited.contains_key(&("razorpay", payment))
                {
                    defer(event, payment);
                }
            }
            ("stripe", "payment_intent.succeeded") => {
                let pi = str_at("/id").unwrap_or_default();
                let linked = str_at("/invoice").is_some() || owners.invoices.contains_key(pi);
                if str_at("/metadata/user_id").is_none() && !linked && payment_owner(pi).is_none() {
                    defer(event, &format!("owner:payment:{pi}"));
                }
            }
            _ => {}
        }
    }
    for (pi, refunded) in largest_refund {
        let (_, _, amount) = &expected.credits[pi];
        expected
            .debited
            .insert(pi.to_owned(), refunded.min(*amount));
    }
    for (pi, (owner, currency, amount)) in &expected.credits {
        let debited = expected.debited.get(pi).copied().unwrap_or_default();
        *expected
            .wallets
            .entry((owner.clone(), currency.clone()))
            .or_default() += amount - debited;
    }
    expected
}

/// Panics unless `pool`'s tables hold what `history` ends in (module docs).
pub async fn assert_settles(pool: &PgPool, history: &History, context: &str) {
    let expected = expected(history);
    let credits: Vec<(String, String, String, i64)> = sqlx::query_as(
        "select source_ref, user_id, currency, amount_minor from wallet_entries
         where provider = 'stripe' and kind = 'credit' and starts_with(source_ref, 'pi_cs')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let debited: Vec<(String, i64)> = sqlx::query_as(
        "select parent_ref, (-sum(amount_minor))::bigint from wallet_entries
         where provider = 'stripe' and kind = 'refund' and starts_with(parent_ref, 'pi_cs')
         group by parent_ref",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let wallets: Vec<(String, String, i64)> = sqlx::query_as(
        "select user_id, currency, balance_minor from wallets where starts_with(user_id, 'buyer_')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let deferred: Vec<(String, String, String)> =
        sqlx::query_as("select provider, event_id, waits_for from deferred_events")
            .fetch_all(pool)
            .await
            .unwrap();
    let found = Expected {
        credits: credits
            .into_iter()
            .map(|(pi, user, currency, amount)| (pi, (user, currency, amount)))
            .collect(),
        debited: debited.into_iter().collect(),
        wallets: wallets
            .into_iter()
            .map(|(user, currency, balance)| ((user, currency), balance))
            .collect(),
        deferred: deferred.into_iter().collect(),
    };
    assert_eq!(
        found, expected,
        "{context}\nthe tables (left) are not what the history's events say (right)"
    );

    let rejected: Vec<(String, String, Value)> = sqlx::query_as(
        "select event_id, outcome, detail from processed_events
         where starts_with(event_id, 'evt_cs') and outcome in ('rejected', 'pending')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(rejected.is_empty(), "{context}\n{rejected:#?}");

    // A Checkout subscription carries its customer's owner once an event
    // named one (the first, when several claim it).
    let subscriptions: Vec<(String, String, Option<String>, Option<String>)> = sqlx::query_as(
        "select s.subscription_id, s.customer_id, s.user_id, o.user_id
         from subscriptions s left join owners o
           on o.provider = s.provider and o.subject = 'customer' and o.subject_id = s.customer_id
         where starts_with(s.subscription_id, 'sub_cs')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (subscription, customer, owner, learned) in subscriptions {
        assert_eq!(
            owner, learned,
            "{context}\nsubscription {subscription} of {customer}"
        );
    }
}
