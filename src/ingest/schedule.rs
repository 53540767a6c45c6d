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
//! the credits that waited for it, whose rows are those of other keys. An
//! event that may release waiting events (events waited for what it may
//! release when the locks were taken, or an event before it in the batch
//! may come to wait for it) is a barrier: nothing moves past it either
//! way. Should a release still happen after events were moved past the
//! event that releases, the engine applies the transaction again in
//! arrival order ([`Schedule::crossed`]).

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
    /// learns, when the locks found one; `awaited[i]`: whether events
    /// waited for what event `i` may release. Each event goes into the
    /// first set of its kind that starts after every set holding an event
    /// it must follow, or into that set itself, since a set applies in
    /// order; a barrier goes after every set, and every event after it
    /// after the barrier.
    pub fn by_kind(units: &[&Decoded], owners: &[Option<String>], awaited: &[bool]) -> Self {
        let mut sets: Vec<(Set, Vec<usize>)> = Vec::new();
        // What events of the batch may come to wait for, and the set of the
        // last barrier.
        let mut may_wait: Vec<(&str, String)> = Vec::new();
        let mut floor = 0;
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
            let provider = event.provider();
            let barrier = awaited.get(i).copied().unwrap_or(false)
                || unit
                    .awaited()
                    .iter()
                    .any(|key| may_wait.iter().any(|(p, k)| *p == provider && k == key));
            may_wait.extend(unit.may_wait_for().map(|key| (provider, key)));
            let after = keys.iter().filter_map(|key| last.get(key)).max().copied();
            let after = match barrier {
                true => sets.len().saturating_sub(1),
                false => after.unwrap_or(0).max(floor),
            };
            let kind = unit.set();
            let at = (after..sets.len())
                .find(|&s| sets[s].0 == kind)
                .unwrap_or_else(|| {
                    sets.push((kind, Vec::new()));
                    sets.len() - 1
                });
            sets[at].1.push(i);
            if barrier {
                floor = at;
            }
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

    /// The set that applies next once `applied` events have: its kind and
    /// the positions (in [`Schedule::order`]) of its events not applied
    /// yet; `None` once every event has.
    pub fn next_set(&self, applied: usize) -> Option<(Set, std::ops::Range<usize>)> {
        let mut end = 0;
        for &(set, len) in &self.sets {
            end += len;
            if applied < end {
                return Some((set, applied..end));
            }
        }
        None
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Schedule;
    use crate::effects::{self, Decoded, Set};
    use crate::providers::Event;

    fn stripe(event_id: &str, event_type: &str, object: serde_json::Value) -> Decoded {
        let body = json!({
            "id": event_id, "object": "event", "created": 1_764_547_200,
            "type": event_type, "data": { "object": object },
        });
        let event = Event::from_stored("stripe", event_id, event_type, body.to_string().into());
        effects::decode(event.expect("a well-formed event"))
    }

    fn credit(n: u32) -> Decoded {
        let object = json!({
            "id": format!("pi_{n}"), "object": "payment_intent", "amount": 100,
            "amount_received": 100, "currency": "usd", "status": "succeeded",
            "metadata": { "user_id": format!("user_{n}") },
        });
        stripe(&format!("evt_{n}"), "payment_intent.succeeded", object)
    }

    /// A paid session of `pi_{n}` whose owner is `user_{n}`.
    fn session(n: u32) -> Decoded {
        let object = json!({
            "id": format!("cs_{n}"), "object": "checkout.session", "mode": "payment",
            "payment_status": "paid", "status": "complete",
            "payment_intent": format!("pi_{n}"), "client_reference_id": format!("user_{n}"),
            "amount_total": 100, "currency": "usd",
        });
        stripe(&format!("evt_cs_{n}"), "checkout.session.completed", object)
    }

    /// The intent of `pi_{n}` as Checkout sends it: no metadata.
    fn intent(n: u32) -> Decoded {
        let object = json!({
            "id": format!("pi_{n}"), "object": "payment_intent", "amount": 100,
            "amount_received": 100, "currency": "usd", "status": "succeeded", "metadata": {},
        });
        stripe(&format!("evt_pi_{n}"), "payment_intent.succeeded", object)
    }

    fn schedule(units: &[Decoded], awaited: &[bool]) -> Schedule {
        let units: Vec<&Decoded> = units.iter().collect();
        Schedule::by_kind(&units, &vec![None; units.len()], awaited)
    }

    #[test]
    fn a_session_that_events_wait_for_is_a_barrier_nothing_moves_past() {
        let units = [credit(1), session(2), credit(3)];
        // Nothing waits for the session: the later credit joins the first.
        let free = schedule(&units, &[false, false, false]);
        assert_eq!(free.order, [0, 2, 1]);
        assert!(free.crossed(2));
        // Its intent waits for it: each keeps its place, nothing crossed.
        let barrier = schedule(&units, &[false, true, false]);
        assert_eq!(barrier.order, [0, 1, 2]);
        assert_eq!(
            barrier.sets.iter().map(|(set, _)| *set).collect::<Vec<_>>(),
            [Set::Credits, Set::Checkouts, Set::Credits]
        );
        assert!((0..3).all(|position| !barrier.crossed(position)));
    }

    #[test]
    fn a_session_whose_intent_came_earlier_in_the_batch_is_a_barrier() {
        // The intent of pi_2 may wait for the owner its session teaches.
        let units = [intent(2), credit(1), session(2), credit(3)];
        let order = schedule(&units, &[false; 4]).order;
        assert_eq!(order, [0, 1, 2, 3]);
        // Another payment's intent makes no barrier of it.
        let units = [intent(9), credit(1), session(2), credit(3)];
        let order = schedule(&units, &[false; 4]).order;
        assert_eq!(order, [0, 1, 3, 2]);
    }
}
