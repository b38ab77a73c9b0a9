//! What a merchant may do: its own limits where it has them, else the defaults, split evenly
//! between the live replicas (each replica holds its share locally; `docs/design.md`,
//! "Per-merchant limits", says why not a shared counter).

use std::{collections::HashMap, num::NonZeroU32};

use crate::config::MerchantLimits;

/// A merchant's own limits, as `payments-api limits set` stores them: `None` keeps the default,
/// `Some(0)` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnLimits {
    pub rate_per_second: Option<u32>,
    pub concurrency: Option<u32>,
}

/// What one merchant may do across every replica (`None`: unlimited), and how many replicas
/// share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowance {
    pub rate_per_second: Option<NonZeroU32>,
    pub concurrency: Option<NonZeroU32>,
    pub replicas: NonZeroU32,
}

impl Allowance {
    /// This replica's part of the rate: an even split, rounded down so that together the
    /// replicas never allow more than the limit (but at least one request per second each).
    pub fn rate_share(&self) -> Option<NonZeroU32> {
        self.rate_per_second
            .map(|limit| share(limit, self.replicas))
    }

    /// This replica's part of the concurrency, split like the rate.
    pub fn concurrency_share(&self) -> Option<NonZeroU32> {
        self.concurrency.map(|limit| share(limit, self.replicas))
    }
}

fn share(limit: NonZeroU32, replicas: NonZeroU32) -> NonZeroU32 {
    NonZeroU32::new(limit.get() / replicas.get()).unwrap_or(NonZeroU32::MIN)
}

/// Everything a replica knows to decide allowances: the defaults, the merchants' own limits and
/// the live replicas, as the registry worker last read them.
#[derive(Debug, Clone)]
pub struct Policy {
    defaults: MerchantLimits,
    own: HashMap<String, OwnLimits>,
    replicas: NonZeroU32,
}

impl Policy {
    /// Before the first registry round: the defaults, this replica alone.
    pub fn new(defaults: MerchantLimits) -> Self {
        Self {
            defaults,
            own: HashMap::new(),
            replicas: NonZeroU32::MIN,
        }
    }

    /// The same defaults with what the registry read.
    pub fn with(&self, own: HashMap<String, OwnLimits>, replicas: NonZeroU32) -> Self {
        Self {
            defaults: self.defaults,
            own,
            replicas,
        }
    }

    pub fn replicas(&self) -> NonZeroU32 {
        self.replicas
    }

    /// The rule: a merchant's own limit if it set one, else the default; 0 is unlimited.
    pub fn allowance(&self, merchant: &str) -> Allowance {
        let own = self.own.get(merchant).copied().unwrap_or_default();
        Allowance {
            rate_per_second: NonZeroU32::new(
                own.rate_per_second.unwrap_or(self.defaults.rate_per_second),
            ),
            concurrency: NonZeroU32::new(own.concurrency.unwrap_or(self.defaults.concurrency)),
            replicas: self.replicas,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults(rate: u32, concurrency: u32) -> MerchantLimits {
        MerchantLimits {
            rate_per_second: rate,
            concurrency,
            ..MerchantLimits::unlimited()
        }
    }

    #[test]
    fn own_limits_win_over_the_defaults_and_zero_is_unlimited() {
        let own = HashMap::from([
            (
                "big".to_owned(),
                OwnLimits {
                    rate_per_second: Some(1000),
                    concurrency: None,
                },
            ),
            (
                "free".to_owned(),
                OwnLimits {
                    rate_per_second: Some(0),
                    concurrency: Some(0),
                },
            ),
        ]);
        let policy = Policy::new(defaults(100, 20)).with(own, NonZeroU32::MIN);
        let big = policy.allowance("big");
        assert_eq!(big.rate_per_second.map(NonZeroU32::get), Some(1000));
        assert_eq!(big.concurrency.map(NonZeroU32::get), Some(20));
        let free = policy.allowance("free");
        assert_eq!((free.rate_per_second, free.concurrency), (None, None));
        let other = policy.allowance("other");
        assert_eq!(other.rate_per_second.map(NonZeroU32::get), Some(100));
    }

    #[test]
    fn replicas_split_a_limit_without_exceeding_it_and_each_keeps_at_least_one() {
        let three = NonZeroU32::new(3).unwrap();
        let policy = Policy::new(defaults(100, 2)).with(HashMap::new(), three);
        let allowance = policy.allowance("m");
        assert_eq!(allowance.rate_share().map(NonZeroU32::get), Some(33));
        assert_eq!(allowance.concurrency_share().map(NonZeroU32::get), Some(1));
        let unlimited = Policy::new(defaults(0, 0)).with(HashMap::new(), three);
        assert_eq!(unlimited.allowance("m").rate_share(), None);
    }
}
