//! A key → index table with Python's hash and equality, for reading graph mappings.

use pyo3::prelude::*;

/// Keys → their index in insertion order, with Python's hash and equality: an
/// open-addressing table that keeps each key's (mixed) hash in its slot, so a probe
/// touches a key object only when the full hashes agree, and needs no Python objects
/// for the indices.
pub(super) struct KeyIndex<'py> {
    pub(super) keys: Vec<Bound<'py, PyAny>>,
    /// Per slot: the mixed hash and `index + 1` (0 = empty).
    slots: Vec<(u64, u32)>,
}

impl<'py> KeyIndex<'py> {
    pub(super) fn with_capacity(n: usize) -> Self {
        KeyIndex {
            keys: Vec::with_capacity(n),
            slots: vec![(0, 0); (2 * n).next_power_of_two().max(16)],
        }
    }

    /// splitmix64's finaliser (a bijection): Python's hashes of ints are the ints.
    #[inline]
    fn mix(h: isize) -> u64 {
        let mut x = h as u64;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    /// The index of `k` (whose hash is `h`), if present.
    pub(super) fn find(&self, k: &Bound<'py, PyAny>, h: isize) -> PyResult<Option<u32>> {
        let m = Self::mix(h);
        let mask = self.slots.len() - 1;
        let mut s = (m as usize) & mask;
        loop {
            let (sm, i) = self.slots[s];
            if i == 0 {
                return Ok(None);
            }
            if sm == m {
                let key = &self.keys[(i - 1) as usize];
                if key.is(k) || same_key(key, k)? {
                    return Ok(Some(i - 1));
                }
            }
            s = (s + 1) & mask;
        }
    }

    /// [`KeyIndex::find`] for many keys (with their hashes), fetching the slots
    /// and then the stored keys they point at ahead of the lookups.
    pub(super) fn resolve(
        &self,
        keys: &[(Bound<'py, PyAny>, isize, bool)],
    ) -> Vec<PyResult<Option<u32>>> {
        const AHEAD: usize = 24;
        let mask = self.slots.len() - 1;
        let mixed: Vec<u64> = keys.iter().map(|(_, h, _)| Self::mix(*h)).collect();
        let slot_of = |i: usize| mixed.get(i).map(|&m| (m, &self.slots[(m as usize) & mask]));
        let mut out = Vec::with_capacity(keys.len());
        for (i, (k, h, _)) in keys.iter().enumerate() {
            if let Some((_, slot)) = slot_of(i + AHEAD) {
                prefetch(slot);
            }
            if let Some((m, &(sm, j))) = slot_of(i + AHEAD * 2 / 3) {
                if j != 0 && sm == m {
                    prefetch(&self.keys[(j - 1) as usize]);
                }
            }
            if let Some((m, &(sm, j))) = slot_of(i + AHEAD / 3) {
                if j != 0 && sm == m {
                    prefetch(object_of(&self.keys[(j - 1) as usize]));
                }
            }
            out.push(self.find(k, *h));
        }
        out
    }

    /// Adds `k`, which must not be present, and returns its index.
    pub(super) fn push(&mut self, k: Bound<'py, PyAny>, h: isize) -> u32 {
        if 2 * (self.keys.len() + 1) > self.slots.len() {
            self.grow();
        }
        let i = self.keys.len() as u32;
        Self::place(&mut self.slots, Self::mix(h), i + 1);
        self.keys.push(k);
        i
    }

    /// Places the keys already in `keys`, with these hashes, into an empty table
    /// sized for them; each slot is fetched well before it is needed.
    pub(super) fn place_all(&mut self, hashes: &[isize]) {
        const AHEAD: usize = 16;
        debug_assert!(self.slots.iter().all(|s| s.1 == 0) && hashes.len() == self.keys.len());
        debug_assert!(2 * hashes.len() <= self.slots.len());
        let mask = self.slots.len() - 1;
        let mixed: Vec<u64> = hashes.iter().map(|&h| Self::mix(h)).collect();
        for (i, &m) in mixed.iter().enumerate() {
            if let Some(&ahead) = mixed.get(i + AHEAD) {
                prefetch(&self.slots[(ahead as usize) & mask]);
            }
            Self::place(&mut self.slots, m, i as u32 + 1);
        }
    }

    fn place(slots: &mut [(u64, u32)], m: u64, slot_value: u32) {
        let mask = slots.len() - 1;
        let mut s = (m as usize) & mask;
        while slots[s].1 != 0 {
            s = (s + 1) & mask;
        }
        slots[s] = (m, slot_value);
    }

    fn grow(&mut self) {
        let mut slots = vec![(0, 0); self.slots.len() * 2];
        for &(m, i) in &self.slots {
            if i != 0 {
                Self::place(&mut slots, m, i);
            }
        }
        self.slots = slots;
    }
}

/// A hint to bring `x` into the cache.
#[inline(always)]
fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint and never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// The object behind `k`, for [`prefetch`].
#[inline(always)]
fn object_of<'a>(k: &'a Bound<'_, PyAny>) -> &'a pyo3::ffi::PyObject {
    // SAFETY: a Bound is a live, GIL-protected object for as long as it is borrowed.
    unsafe { &*k.as_ptr() }
}

/// `a == b` as a dict lookup decides it.
fn same_key(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<bool> {
    // SAFETY: both pointers are live objects borrowed for the call, and the GIL is held.
    match unsafe { pyo3::ffi::PyObject_RichCompareBool(a.as_ptr(), b.as_ptr(), pyo3::ffi::Py_EQ) } {
        -1 => Err(PyErr::fetch(a.py())),
        r => Ok(r == 1),
    }
}
