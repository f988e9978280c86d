//! Memory pressure of an ordering: the most results held at once when the
//! graph runs one task at a time in priority order, each result released once
//! all its dependents ran.

use crate::csr::Csr;

/// Follows the pressure while nodes run one by one.
pub(crate) struct Tracker<'g> {
    deps: &'g Csr,
    /// Per node, how many of its dependents have yet to run.
    waiting: Vec<u32>,
    held: u32,
    peak: u32,
    limit: u32,
}

impl<'g> Tracker<'g> {
    pub(crate) fn new(deps: &'g Csr, limit: Option<u32>) -> Self {
        Tracker {
            deps,
            waiting: waiting_counts(deps),
            held: 0,
            peak: 0,
            limit: limit.unwrap_or(u32::MAX),
        }
    }

    /// Runs `k`; false once the peak reaches the limit.
    #[inline]
    pub(crate) fn run(&mut self, k: u32) -> bool {
        self.held += 1;
        self.peak = self.peak.max(self.held);
        for &d in self.deps.row(k) {
            let w = &mut self.waiting[d as usize];
            *w -= 1;
            if *w == 0 {
                self.held -= 1;
            }
        }
        self.peak < self.limit
    }

    pub(crate) fn peak(&self) -> u32 {
        self.peak
    }
}

fn waiting_counts(deps: &Csr) -> Vec<u32> {
    let mut waiting = vec![0u32; deps.len()];
    for k in 0..deps.len() as u32 {
        for &d in deps.row(k) {
            waiting[d as usize] += 1;
        }
    }
    waiting
}

/// `prio` may repeat values (upstream's alias-leaf numbers); ties run in index
/// order.
pub(crate) fn max_held(deps: &Csr, prio: &[i64]) -> u32 {
    let mut t = Tracker::new(deps, None);
    for k in run_order(prio) {
        t.run(k);
    }
    t.peak()
}

/// Node indices by ascending `(prio, index)`; a counting sort, as priorities
/// are nearly a permutation of `0..n`.
fn run_order(prio: &[i64]) -> Vec<u32> {
    let n = prio.len();
    let (Some(&lo), Some(&hi)) = (prio.iter().min(), prio.iter().max()) else {
        return Vec::new();
    };
    let span = (hi - lo) as u128 + 1;
    if span > 4 * n as u128 {
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by_key(|&k| prio[k as usize]);
        return order;
    }
    let mut start = vec![0u32; span as usize + 1];
    for &p in prio {
        start[(p - lo) as usize + 1] += 1;
    }
    for i in 1..start.len() {
        start[i] += start[i - 1];
    }
    let mut order = vec![0u32; n];
    for (k, &p) in prio.iter().enumerate() {
        let slot = &mut start[(p - lo) as usize];
        order[*slot as usize] = k as u32;
        *slot += 1;
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(rows: &[&[u32]]) -> Csr {
        Csr::from_rows(rows.iter().copied())
    }

    #[test]
    fn counts_results_until_their_last_user_ran() {
        // a, b -> c; d alone; c and d are outputs and stay held.
        let deps = csr(&[&[], &[], &[0, 1], &[]]);
        assert_eq!(max_held(&deps, &[0, 1, 2, 3]), 3);
        assert_eq!(max_held(&deps, &[1, 2, 3, 0]), 4);
        // Chain: only two held at a time.
        let chain = csr(&[&[], &[0], &[1]]);
        assert_eq!(max_held(&chain, &[0, 1, 2]), 2);
    }

    #[test]
    fn repeated_and_negative_priorities_run_in_index_order() {
        assert_eq!(run_order(&[3, -1, 3, 0]), vec![1, 3, 0, 2]);
        assert_eq!(run_order(&[i64::MAX / 2, 0]), vec![1, 0]);
    }
}
