//! What of a [`Snapshot`] two databases must agree on when their events
//! committed in different orders, and a readable report of how two
//! snapshots differ.

use std::fmt::Debug;

use serde_json::Value;

use super::snapshot::{
    Deferred, Entry, Event, Invoice, InvoicePayment, OutboxRow, Owner, Payment, Snapshot,
    Subscription, Wallet, stream,
};

/// What does not depend on the order in which events committed, for
/// histories without races (`Variant::Concurrent`):
/// - every event's outcome after everything (a `deferred` event that was
///   applied later counts as what it became), with two classes that arrival
///   order decides by design: a subscription change is `processed` or
///   `superseded` depending on whether a later change was applied first,
///   and a `charge.succeeded` is `ignored` (the receipt still written)
///   rather than `processed` when its payment intent was credited first.
///   Its detail is kept for `rejected` events only (`applied_by` removed);
/// - events still waiting, wallets, the sum of each wallet's entries, the
///   entries (without their position), payments, subscriptions, invoices;
/// - the owners learned and the invoices' payments, without the event that
///   taught or joined them: of several events that say the same (a
///   session and its `async_payment_succeeded`), the first to commit does
///   (what they say never differs in these histories);
/// - the outbox rows but `subscription.changed`, without `balance_minor`
///   (the balance after an entry depends on what came before it); of
///   `subscription.changed`, which changes are announced depends on order,
///   so only each subscription's last announcement is kept, without
///   `previous_status` and without the event that made it: it must
///   announce the subscription's final state.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub events: Vec<Event>,
    pub deferred: Vec<Deferred>,
    pub wallets: Vec<Wallet>,
    pub entry_sums: Vec<(String, String, i64)>,
    pub entries: Vec<Entry>,
    pub payments: Vec<Payment>,
    pub subscriptions: Vec<Subscription>,
    pub owners: Vec<Owner>,
    pub invoices: Vec<Invoice>,
    pub invoice_payments: Vec<InvoicePayment>,
    pub outbox: Vec<OutboxRow>,
    pub announced: Vec<OutboxRow>,
}

impl Snapshot {
    pub fn settled(&self) -> Settled {
        let events = self
            .events
            .iter()
            .map(|event| {
                let mut detail = Value::Null;
                if event.outcome == "rejected" {
                    detail = event.detail.clone();
                    if let Value::Object(fields) = &mut detail {
                        fields.remove("applied_by");
                    }
                }
                Event {
                    outcome: settled_outcome(event).to_owned(),
                    detail,
                    ..event.clone()
                }
            })
            .collect();
        let mut entry_sums: Vec<(String, String, i64)> = Vec::new();
        for entry in &self.entries {
            match entry_sums
                .iter_mut()
                .find(|(user, currency, _)| *user == entry.user_id && *currency == entry.currency)
            {
                Some((_, _, sum)) => *sum += entry.amount_minor,
                None => entry_sums.push((
                    entry.user_id.clone(),
                    entry.currency.clone(),
                    entry.amount_minor,
                )),
            }
        }
        entry_sums.sort();
        let without = |row: &OutboxRow, key: &str| {
            let mut row = OutboxRow {
                position: 0,
                ..row.clone()
            };
            if let Value::Object(fields) = &mut row.payload {
                fields.remove(key);
            }
            row
        };
        let mut announced: Vec<&OutboxRow> = Vec::new();
        for row in self
            .outbox
            .iter()
            .filter(|row| row.topic == "subscription.changed")
        {
            match announced
                .iter_mut()
                .find(|last| stream(last) == stream(row))
            {
                Some(last) if last.position < row.position => *last = row,
                Some(_) => {}
                None => announced.push(row),
            }
        }
        let mut announced: Vec<OutboxRow> = announced
            .into_iter()
            .map(|row| OutboxRow {
                dedupe_key: String::new(),
                event_id: String::new(),
                ..without(row, "previous_status")
            })
            .collect();
        announced.sort_by_key(stream);
        Settled {
            events,
            deferred: self.deferred.clone(),
            wallets: self.wallets.clone(),
            entry_sums,
            entries: self
                .entries
                .iter()
                .map(|entry| Entry {
                    position: 0,
                    ..entry.clone()
                })
                .collect(),
            payments: self.payments.clone(),
            subscriptions: self.subscriptions.clone(),
            owners: self
                .owners
                .iter()
                .map(|owner| Owner {
                    event_id: String::new(),
                    ..owner.clone()
                })
                .collect(),
            invoices: self.invoices.clone(),
            invoice_payments: self
                .invoice_payments
                .iter()
                .map(|paid| InvoicePayment {
                    event_id: String::new(),
                    ..paid.clone()
                })
                .collect(),
            outbox: self
                .outbox
                .iter()
                .filter(|row| row.topic != "subscription.changed")
                .map(|row| without(row, "balance_minor"))
                .collect(),
            announced,
        }
    }
}

/// An event's outcome, with the classes arrival order decides put together
/// ([`Settled`]).
fn settled_outcome(event: &Event) -> &str {
    let subscription = match event.provider.as_str() {
        "stripe" => event.event_type.starts_with("customer.subscription."),
        "razorpay" => event.event_type.starts_with("subscription."),
        _ => false,
    };
    let receipt_after_credit = event.provider == "stripe"
        && event.event_type == "charge.succeeded"
        && event.detail["reason"] == "the payment intent was already credited";
    match event.outcome.as_str() {
        "processed" | "superseded" if subscription => "processed or superseded",
        "ignored" if receipt_after_credit => "processed",
        outcome => outcome,
    }
}

/// Tables as lines, for a readable difference.
pub trait Tables: PartialEq + Debug {
    fn tables(&self) -> Vec<(&'static str, Vec<String>)>;
}

fn lines<T: Debug>(rows: &[T]) -> Vec<String> {
    rows.iter().map(|row| format!("{row:?}")).collect()
}

impl Tables for Snapshot {
    fn tables(&self) -> Vec<(&'static str, Vec<String>)> {
        vec![
            ("processed_events", lines(&self.events)),
            ("deferred_events", lines(&self.deferred)),
            ("wallets", lines(&self.wallets)),
            ("wallet_entries", lines(&self.entries)),
            ("payments", lines(&self.payments)),
            ("subscriptions", lines(&self.subscriptions)),
            ("owners", lines(&self.owners)),
            ("invoices", lines(&self.invoices)),
            ("invoice_payments", lines(&self.invoice_payments)),
            ("outbox", lines(&self.outbox)),
        ]
    }
}

impl Tables for Settled {
    fn tables(&self) -> Vec<(&'static str, Vec<String>)> {
        vec![
            ("processed_events", lines(&self.events)),
            ("deferred_events", lines(&self.deferred)),
            ("wallets", lines(&self.wallets)),
            ("entry sums", lines(&self.entry_sums)),
            ("wallet_entries", lines(&self.entries)),
            ("payments", lines(&self.payments)),
            ("subscriptions", lines(&self.subscriptions)),
            ("owners", lines(&self.owners)),
            ("invoices", lines(&self.invoices)),
            ("invoice_payments", lines(&self.invoice_payments)),
            ("outbox", lines(&self.outbox)),
            ("last subscription.changed", lines(&self.announced)),
        ]
    }
}

/// Panics, listing per table the rows found on one side only, unless
/// `left` and `right` are equal.
pub fn assert_same<T: Tables>(left: &T, right: &T, names: [&str; 2], context: &str) {
    if left == right {
        return;
    }
    let mut report = String::new();
    for ((table, left), (_, right)) in left.tables().into_iter().zip(right.tables()) {
        let mut differences = 0;
        for (name, rows, other) in [(names[0], &left, &right), (names[1], &right, &left)] {
            for row in rows.iter().filter(|row| !other.contains(row)) {
                report.push_str(&format!("  {table}, only {name}: {row}\n"));
                differences += 1;
            }
        }
        if left != right && differences == 0 {
            report.push_str(&format!(
                "  {table}: the same rows, another count or order\n"
            ));
        }
    }
    panic!("{context}\nthe tables differ:\n{report}");
}
