//! `total_dependencies`: one plus the totals of all dependencies.
//!
//! Shared ancestors are counted once per path, so the value grows
//! exponentially on lattice-like graphs. Upstream uses unbounded Python ints
//! and compares them exactly; values that do not fit in a `u64` spill into
//! little-endian limb vectors here so comparisons stay exact.

use std::cmp::Ordering;

use rustc_hash::FxHashMap;

use crate::csr::Csr;

/// Marks a node whose total lives in `spilled`.
const SPILLED: u64 = u64::MAX;

pub(crate) struct TotalDeps {
    small: Vec<u64>,
    spilled: FxHashMap<u32, Vec<u64>>,
}

impl TotalDeps {
    /// `topo` must list every live node after all of its dependencies.
    pub(crate) fn compute(deps: &Csr, topo: &[u32]) -> Self {
        let mut small = vec![0u64; deps.len()];
        let mut spilled: FxHashMap<u32, Vec<u64>> = FxHashMap::default();
        let mut wide: Vec<u64> = Vec::new();
        for &k in topo {
            let mut sum: u64 = 1;
            let mut is_wide = false;
            for &d in deps.row(k) {
                let v = small[d as usize];
                if !is_wide && v != SPILLED {
                    if let Some(s) = sum.checked_add(v) {
                        sum = s;
                        continue;
                    }
                }
                if !is_wide {
                    is_wide = true;
                    wide.clear();
                    wide.push(sum);
                }
                if v == SPILLED {
                    add_limbs(&mut wide, &spilled[&d]);
                } else {
                    add_limbs(&mut wide, &[v]);
                }
            }
            if !is_wide && sum != SPILLED {
                small[k as usize] = sum;
            } else {
                if !is_wide {
                    wide.clear();
                    wide.push(sum);
                }
                small[k as usize] = SPILLED;
                spilled.insert(k, wide.clone());
            }
        }
        TotalDeps { small, spilled }
    }

    #[inline]
    pub(crate) fn cmp(&self, a: u32, b: u32) -> Ordering {
        match (self.small[a as usize], self.small[b as usize]) {
            (SPILLED, SPILLED) => cmp_limbs(&self.spilled[&a], &self.spilled[&b]),
            (SPILLED, _) => Ordering::Greater,
            (_, SPILLED) => Ordering::Less,
            (x, y) => x.cmp(&y),
        }
    }
}

fn add_limbs(acc: &mut Vec<u64>, x: &[u64]) {
    if acc.len() < x.len() {
        acc.resize(x.len(), 0);
    }
    let mut carry = false;
    for (i, slot) in acc.iter_mut().enumerate() {
        let add = x.get(i).copied().unwrap_or(0);
        if add == 0 && !carry && i >= x.len() {
            break;
        }
        let (s1, c1) = slot.overflowing_add(add);
        let (s2, c2) = s1.overflowing_add(u64::from(carry));
        *slot = s2;
        carry = c1 || c2;
    }
    if carry {
        acc.push(1);
    }
}

/// Limb vectors never carry leading zero limbs, so length decides first.
fn cmp_limbs(a: &[u64], b: &[u64]) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.iter().rev().cmp(b.iter().rev()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ladder where every rung depends on both nodes of the rung below
    /// doubles the total per rung, overflowing u64 after ~64 rungs.
    fn ladder(rungs: u32) -> (Csr, Vec<u32>) {
        let mut rows: Vec<Vec<u32>> = vec![vec![], vec![]];
        for r in 1..rungs {
            let below = [2 * (r - 1), 2 * (r - 1) + 1];
            rows.push(below.to_vec());
            rows.push(below.to_vec());
        }
        let csr = Csr::from_rows(rows.iter().map(Vec::as_slice));
        let topo = (0..2 * rungs).collect();
        (csr, topo)
    }

    #[test]
    fn exact_beyond_u64() {
        let (csr, topo) = ladder(200);
        let totals = TotalDeps::compute(&csr, &topo);
        // total(r) = 2^(r+1) - 1 for rung r.
        for r in [62u32, 63, 64, 100, 199] {
            let k = 2 * r;
            let expected_bits = r + 1;
            if expected_bits < 64 {
                assert_eq!(totals.small[k as usize], (1u64 << expected_bits) - 1);
            } else {
                let limbs = &totals.spilled[&k];
                let ones: u32 = limbs.iter().map(|l| l.count_ones()).sum();
                assert_eq!(ones, expected_bits);
            }
            assert_eq!(totals.cmp(k, k + 1), Ordering::Equal);
            assert_eq!(totals.cmp(k, k - 1), Ordering::Greater);
            assert_eq!(totals.cmp(k - 2, k), Ordering::Less);
        }
    }
}
