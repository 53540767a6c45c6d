//! The order a transaction applies its events in: each kind's events
//! together, so that they share statements ([`effects::apply_set`]), as
//! far as that changes nothing anyone can see. Two events keep their
//! arrival order when they share a key of their plans (a payment's credit,
//! a subscription, a customer), or when both may move a wallet of one
//! user (named on the event, or found under the locks: a refund's credit's
//! owner, a learned owner). So every wallet's entries and balances, every
//! stream of outbox rows and every row's history come out as one event at a
//! time in arrival order would leave them; events that share nothing touch
//! no row in common.
//!
//! One effect reaches past its plan's keys: an owner learned anew releases
//! the credits that waited for it, whose rows are those of other keys.
//! When such a release happens after events were moved past the event that
//! releases, the engine applies the transaction again in arrival order
//! ([`Schedule::crossed`]).

use std::collections::HashMap;

use crate::effects::{Decoded, Set};

/// Where each event of a transaction applies.
#[derive(Debug)]
pub(super) struct Schedule {
    /// Indexes of the events, in the order they apply.
    pub order: Vec<usize>,
    /// `order` cut into sets: each set's kind and length.
    pub sets: Vec<(Set, usize)>,
}

impl Schedule {
    /// Arrival order, each event a set of its own kind as it comes: how a
    /// transaction applies when moving events would not be safe.
    pub fn arrival(units: &[&Decoded]) -> Self {
        let mut sets: Vec<(Set, usize)> = Vec::new();
        for unit in units {
            match sets.last_mut() {
                Some((set, len)) if *set == unit.set() => *len += 1,
                _ => sets.push((unit.set(), 1)),
            }
        }
        Schedule {
            order: (0..units.len()).collect(),
            sets,
        }
    }

    /// Each kind together wherever arrival order allows (the module's
    /// rules). `owners[i]`: the owner whose wallet event `i` debits or
    /// learns, when the locks found one. Each event goes into the first set
    /// of its kind that starts after every set holding an event it must
    /// follow, or into that set itself, since a set applies in order.
    pub fn by_kind(units: &[&Decoded], owners: &[Option<String>]) -> Self {
        let mut sets: Vec<(Set, Vec<usize>)> = Vec::new();
        // The last set holding each key, and the users of the events that
        // hold each plan key so far.
        let mut last: HashMap<String, usize> = HashMap::new();
        let mut users_of: HashMap<&str, Vec<String>> = HashMap::new();
        for (i, unit) in units.iter().enumerate() {
            let plan = unit.plan();
            let mut users: Vec<String> = unit
                .named_users()
                .into_iter()
                .chain(owners.get(i).and_then(|o| o.as_deref()))
                .map(user_key)
                .collect();
            let unresolved = plan.debits.is_some() || plan.finds_owner.is_some();
            if users.is_empty() && unresolved {
                // Its credit, or its owner, comes from an event before it in
                // this transaction: that event's wallet is the one it moves.
                users.extend(
                    plan.keys
                        .iter()
                        .filter_map(|key| users_of.get(key.as_str()))
                        .flatten()
                        .cloned(),
                );
            }
            let event = unit.event();
            let keys: Vec<String> = plan
                .keys
                .iter()
                .cloned()
                .chain(users.iter().cloned())
                .chain([format!("event:{}:{}", event.provider(), event.event_id())])
                .collect();
            let after = keys.iter().filter_map(|key| last.get(key)).max().copied();
            let kind = unit.set();
            let at = (after.unwrap_or(0)..sets.len())
                .find(|&s| sets[s].0 == kind)
                .unwrap_or_else(|| {
                    sets.push((kind, Vec::new()));
                    sets.len() - 1
                });
            sets[at].1.push(i);
            for key in keys {
                let held = last.entry(key).or_insert(at);
                *held = (*held).max(at);
            }
            for key in &plan.keys {
                users_of
                    .entry(key.as_str())
                    .or_default()
                    .extend(users.iter().cloned());
            }
        }
        Schedule {
            order: sets
                .iter()
                .flat_map(|(_, members)| members.iter().copied())
                .collect(),
            sets: sets
                .iter()
                .map(|(set, members)| (*set, members.len()))
                .collect(),
        }
    }

    /// Whether an event applied at `position` of [`Schedule::order`] was
    /// moved past, or had others moved past it: some event that arrived
    /// before it applies after it, or one that arrived after applies before.
    pub fn crossed(&self, position: usize) -> bool {
        let Some(&event) = self.order.get(position) else {
            return false;
        };
        let (before, after) = self.order.split_at(position);
        before.iter().any(|&other| other > event) || after.iter().any(|&other| other < event)
    }
}

/// The order key of the wallets of `user_id`, in every currency.
fn user_key(user_id: &str) -> String {
    format!("user:{user_id}")
}
