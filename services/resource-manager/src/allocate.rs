//! Sharing the budget (`resource_manager.total_handlers`) among the stages' wishes.
//!
//! 1. Minimums, higher priority first: if the budget cannot hold every `min_handlers`, the
//!    lower tiers go without, and a tier that only partly fits shares in proportion to its
//!    minimums.
//! 2. Then tier by tier, higher first: a stage with ready events and no handler gets one
//!    (so nothing in a tier starves behind a big neighbour), then the tier's handlers —
//!    what it already holds plus what is left — are shared in proportion to need, each stage
//!    between what it holds and what it wants. What a capped stage cannot use flows to the
//!    others of its tier, and what the tier cannot use flows to the next tier.
//!
//! Shares are computed exactly in reals, then rounded by largest remainder, ties broken by
//! stage name, so the result is deterministic and never exceeds the budget.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use cascade_core::QueueName;

/// What one stage asks of the budget.
#[derive(Clone, Debug)]
pub(crate) struct Claim<'a> {
    pub(crate) stage: &'a QueueName,
    pub(crate) priority: u32,
    pub(crate) min: u32,
    /// At least `min`.
    pub(crate) want: u32,
    /// The weight within a tier.
    pub(crate) need: f64,
    /// Ready events and no handler: gets one before its tier is shared.
    pub(crate) woken: bool,
}

/// Handlers per claim, in the claims' order; their sum is at most `budget`.
pub(crate) fn allocate(budget: u32, claims: &[Claim<'_>]) -> Vec<u32> {
    let mut tiers: BTreeMap<Reverse<u32>, Vec<usize>> = BTreeMap::new();
    for (index, claim) in claims.iter().enumerate() {
        tiers
            .entry(Reverse(claim.priority))
            .or_default()
            .push(index);
    }
    let mut handlers = vec![0u32; claims.len()];
    let mut left = budget;
    for tier in tiers.values() {
        let items: Vec<Item<'_>> = tier
            .iter()
            .map(|&i| {
                let min = claims[i].min.min(claims[i].want);
                Item::new(claims[i].stage, 0, min, f64::from(min))
            })
            .collect();
        left -= give(left, tier, &items, &mut handlers);
    }
    for tier in tiers.values() {
        let mut woken: Vec<usize> = tier
            .iter()
            .copied()
            .filter(|&i| claims[i].woken && handlers[i] == 0 && claims[i].want > 0)
            .collect();
        woken.sort_by(|&a, &b| claims[b].need.total_cmp(&claims[a].need));
        for i in woken.into_iter().take(left as usize) {
            handlers[i] = 1;
            left -= 1;
        }
        let held: u32 = tier.iter().map(|&i| handlers[i]).sum();
        let items: Vec<Item<'_>> = tier
            .iter()
            .map(|&i| Item::new(claims[i].stage, handlers[i], claims[i].want, claims[i].need))
            .collect();
        let pool = left + held;
        left = pool - give(pool, tier, &items, &mut handlers);
    }
    debug_assert!(handlers.iter().map(|&h| u64::from(h)).sum::<u64>() <= u64::from(budget));
    handlers
}

/// Shares `pool` among `items` (the claims `tier` points at) and returns how many it gave.
fn give(pool: u32, tier: &[usize], items: &[Item<'_>], handlers: &mut [u32]) -> u32 {
    let shares = share(pool, items);
    let mut given = 0;
    for (&i, share) in tier.iter().zip(shares) {
        handlers[i] = share;
        given += share;
    }
    given
}

/// One stage in a sharing: it gets between `lower` and `upper`, by `weight`.
#[derive(Clone, Debug)]
struct Item<'a> {
    name: &'a str,
    lower: u32,
    upper: u32,
    weight: f64,
}

impl<'a> Item<'a> {
    fn new(stage: &'a QueueName, lower: u32, upper: u32, weight: f64) -> Item<'a> {
        let weight = if weight.is_finite() && weight > 0.0 {
            weight
        } else {
            0.0
        };
        Item {
            name: stage.as_str(),
            lower,
            upper: upper.max(lower),
            weight,
        }
    }
}

/// Integer shares of `pool` (at least the sum of the lower bounds), each within its bounds,
/// summing to `pool` or to the sum of the upper bounds if that is less.
fn share(pool: u32, items: &[Item<'_>]) -> Vec<u32> {
    let total_upper: u64 = items.iter().map(|item| u64::from(item.upper)).sum();
    if total_upper <= u64::from(pool) {
        return items.iter().map(|item| item.upper).collect();
    }
    let exact = exact_shares(f64::from(pool), items);
    round(pool, items, &exact)
}

/// Real shares: `clamp(λ × weight, lower, upper)` with λ chosen so that they sum to `pool`.
/// Items without weight get their lower bound, and only what the weighted ones cannot take
/// goes to them, in proportion to their room.
fn exact_shares(pool: f64, items: &[Item<'_>]) -> Vec<f64> {
    let at = |lambda: f64| -> Vec<f64> {
        items
            .iter()
            .map(|item| (lambda * item.weight).clamp(f64::from(item.lower), f64::from(item.upper)))
            .collect()
    };
    let high = items
        .iter()
        .filter(|item| item.weight > 0.0)
        .map(|item| f64::from(item.upper) / item.weight)
        .fold(0.0, f64::max);
    let mut shares = at(high);
    let full: f64 = shares.iter().sum();
    if full > pool {
        let (mut low_lambda, mut high_lambda) = (0.0, high);
        // Bisection to the precision of f64: deterministic, and short enough.
        for _ in 0..200 {
            let middle = (low_lambda + high_lambda) / 2.0;
            if at(middle).iter().sum::<f64>() > pool {
                high_lambda = middle;
            } else {
                low_lambda = middle;
            }
        }
        return at(low_lambda);
    }
    let spare = pool - full;
    let room: f64 = items
        .iter()
        .zip(&shares)
        .filter(|(item, _)| item.weight == 0.0)
        .map(|(item, share)| f64::from(item.upper) - share)
        .sum();
    if room > 0.0 {
        for (item, share) in items.iter().zip(shares.iter_mut()) {
            if item.weight == 0.0 {
                *share += spare * (f64::from(item.upper) - *share) / room;
            }
        }
    }
    shares
}

/// Largest-remainder rounding of `exact` to integers summing to `pool`, within the bounds.
fn round(pool: u32, items: &[Item<'_>], exact: &[f64]) -> Vec<u32> {
    // Remainders are compared to a millionth so that float noise cannot beat the name order.
    let remainder = |i: usize, got: u32| ((exact[i] - f64::from(got)) * 1e6).round() as i64;
    let mut got: Vec<u32> = items
        .iter()
        .zip(exact)
        .map(|(item, &x)| ((x + 1e-9).floor() as u32).clamp(item.lower, item.upper))
        .collect();
    let mut assigned: u64 = got.iter().map(|&g| u64::from(g)).sum();
    while assigned > u64::from(pool) {
        let Some(i) = (0..items.len())
            .filter(|&i| got[i] > items[i].lower)
            .min_by_key(|&i| (remainder(i, got[i]), Reverse(items[i].name)))
        else {
            break;
        };
        got[i] -= 1;
        assigned -= 1;
    }
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| (Reverse(remainder(i, got[i])), items[i].name));
    while assigned < u64::from(pool) {
        let before = assigned;
        for &i in &order {
            if assigned < u64::from(pool) && got[i] < items[i].upper {
                got[i] += 1;
                assigned += 1;
            }
        }
        if assigned == before {
            break;
        }
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(count: usize) -> Vec<QueueName> {
        (0..count)
            .map(|i| QueueName::parse(&format!("p.s{i}")).expect("valid name"))
            .collect()
    }

    fn claim(stage: &QueueName, priority: u32, min: u32, want: u32, need: f64) -> Claim<'_> {
        Claim {
            stage,
            priority,
            min,
            want,
            need,
            woken: false,
        }
    }

    #[test]
    fn shares_in_proportion_and_breaks_ties_by_name() {
        let n = names(3);
        let claims = [
            claim(&n[0], 1, 0, 10, 6.0),
            claim(&n[1], 1, 0, 10, 3.0),
            claim(&n[2], 1, 0, 10, 3.0),
        ];
        // 7 × (6, 3, 3) / 12 = (3.5, 1.75, 1.75): remainders 0.5, 0.75, 0.75.
        assert_eq!(allocate(7, &claims), vec![3, 2, 2]);
        assert_eq!(allocate(6, &claims), vec![3, 2, 1]);
    }

    #[test]
    fn higher_tiers_first_and_leftovers_flow_down() {
        let n = names(3);
        let claims = [
            claim(&n[0], 2, 0, 3, 9.0),
            claim(&n[1], 1, 1, 9, 9.0),
            claim(&n[2], 0, 1, 9, 9.0),
        ];
        assert_eq!(allocate(8, &claims), vec![3, 4, 1]);
        assert_eq!(allocate(2, &claims), vec![0, 1, 1], "minimums first");
    }

    #[test]
    fn zero_need_stages_get_only_what_nobody_needs() {
        let n = names(2);
        let claims = [claim(&n[0], 1, 0, 4, 0.0), claim(&n[1], 1, 0, 2, 5.0)];
        assert_eq!(allocate(3, &claims), vec![1, 2]);
    }

    #[test]
    fn a_proportional_share_respects_what_a_stage_already_holds() {
        let n = names(2);
        // s0's minimum of 5 is more than its proportional share of 10.
        let claims = [claim(&n[0], 1, 5, 5, 1.0), claim(&n[1], 1, 0, 10, 9.0)];
        assert_eq!(allocate(10, &claims), vec![5, 5]);
    }
}
