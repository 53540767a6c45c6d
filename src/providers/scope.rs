//! Which of a source's events may move money: its mode (Stripe's
//! `livemode`) and its Connect accounts (an event's `account`). A test-mode
//! secret left in a live source's rotation list, an `sk_test_` key given
//! to the sweep, or a Connect endpoint's events arriving on the platform's
//! endpoint (where connected accounts set their own `metadata.user_id`)
//! must never credit a real wallet: such an event is recorded `rejected`
//! on the webhook, and skipped by the sweep.
//!
//! Only Stripe's envelope says its mode and account; the other schemes
//! carry neither, and their sources accept every event ([`Scope::ANY`]).

use std::collections::BTreeSet;

/// The events a source accepts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// `Some(true)`: live events only; `Some(false)`: test-mode events
    /// only; `None`: either.
    pub livemode: Option<bool>,
    /// Whether events of connected accounts (those with an `account`) are
    /// accepted at all.
    pub connect: bool,
    /// With `connect`: only these accounts' events, when set.
    pub accounts: Option<BTreeSet<String>>,
}

impl Scope {
    /// Every event: either mode, no connected account.
    pub const ANY: Scope = Scope {
        livemode: None,
        connect: false,
        accounts: None,
    };

    /// Whether it takes connected account `account`'s events (of its mode).
    pub fn takes_account(&self, account: &str) -> bool {
        self.connect
            && self
                .accounts
                .as_ref()
                .is_none_or(|accounts| accounts.contains(account))
    }

    /// Why an event of mode `livemode` from connected account `account`
    /// (none: the platform's own) is not this source's to apply; `None`
    /// when it is. The reason names the setting, never the event's values.
    pub fn refusal(&self, livemode: Option<bool>, account: Option<&str>) -> Option<String> {
        if let Some(wanted) = self.livemode {
            match livemode {
                Some(mode) if mode == wanted => {}
                Some(mode) => {
                    return Some(format!(
                        "a {} event on a source that takes {} events only (WEBHOOKD_SOURCE_<NAME>_LIVEMODE)",
                        mode_name(mode),
                        mode_name(wanted)
                    ));
                }
                None => {
                    return Some(format!(
                        "the event does not say its mode (livemode), and this source takes {} events only",
                        mode_name(wanted)
                    ));
                }
            }
        }
        match (account, &self.accounts) {
            (None, _) => None,
            (Some(_), _) if !self.connect => Some(
                "an event of a connected account (account) on a source without \
                 WEBHOOKD_SOURCE_<NAME>_CONNECT=true"
                    .to_owned(),
            ),
            (Some(account), Some(accounts)) if !accounts.contains(account) => Some(
                "an event of a connected account that WEBHOOKD_STRIPE_CONNECT_ACCOUNTS does not list"
                    .to_owned(),
            ),
            (Some(_), _) => None,
        }
    }
}

/// The mode of a Stripe API key, from its prefix: `sk_live_`/`rk_live_`
/// live, `sk_test_`/`rk_test_` test, anything else unknown.
pub fn key_mode(key: &str) -> Option<bool> {
    match key.get(..8) {
        Some("sk_live_" | "rk_live_") => Some(true),
        Some("sk_test_" | "rk_test_") => Some(false),
        _ => None,
    }
}

/// `live` or `test-mode`.
pub fn mode_name(livemode: bool) -> &'static str {
    if livemode { "live" } else { "test-mode" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_source_takes_any_account_or_those_listed() {
        assert!(!Scope::ANY.takes_account("acct_1"));
        let any = Scope {
            connect: true,
            ..Scope::ANY
        };
        assert!(any.takes_account("acct_1"));
        let listed = Scope {
            accounts: Some(BTreeSet::from(["acct_2".to_owned()])),
            ..any
        };
        assert!(!listed.takes_account("acct_1"));
        assert!(listed.takes_account("acct_2"));
    }

    #[test]
    fn a_source_refuses_the_other_mode_and_connected_accounts_it_was_not_given() {
        let live = Scope {
            livemode: Some(true),
            ..Scope::ANY
        };
        assert_eq!(live.refusal(Some(true), None), None);
        assert!(
            live.refusal(Some(false), None)
                .unwrap()
                .contains("test-mode event")
        );
        assert!(live.refusal(None, None).unwrap().contains("does not say"));
        assert_eq!(Scope::ANY.refusal(Some(false), None), None);
        assert_eq!(Scope::ANY.refusal(None, None), None);

        let account = Some("acct_1");
        assert!(
            Scope::ANY
                .refusal(None, account)
                .unwrap()
                .contains("CONNECT=true")
        );
        let connect = Scope {
            connect: true,
            ..Scope::ANY
        };
        assert_eq!(connect.refusal(None, account), None);
        let listed = Scope {
            accounts: Some(BTreeSet::from(["acct_2".to_owned()])),
            ..connect
        };
        assert!(
            listed
                .refusal(None, account)
                .unwrap()
                .contains("does not list")
        );
        assert_eq!(listed.refusal(None, Some("acct_2")), None);
        assert_eq!(listed.refusal(None, None), None, "the platform's own");
    }

    #[test]
    fn a_key_s_prefix_says_its_mode() {
        assert_eq!(key_mode("sk_live_abc"), Some(true));
        assert_eq!(key_mode("rk_live_abc"), Some(true));
        assert_eq!(key_mode("sk_test_abc"), Some(false));
        assert_eq!(key_mode("rk_test_abc"), Some(false));
        assert_eq!(key_mode("whsec_abc"), None);
        assert_eq!(key_mode("sk_"), None);
    }
}
