//! A small set of ids with deterministic iteration order.
//!
//! Most task-level sets hold zero to a handful of members, so they live in a plain
//! vector with linear operations; a set that grows past [`PROMOTE_AT`] members (a
//! hub task with thousands of dependents) is promoted to an indexed hash set so that
//! removal stays O(1). Iteration order depends only on the sequence of operations,
//! never on hash values.

use indexmap::IndexSet;
use smallvec::SmallVec;
use std::hash::Hash;

const PROMOTE_AT: usize = 32;

#[derive(Clone, Debug)]
pub enum IdSet<T: Copy + Eq + Hash> {
    Small(Vec<T>),
    Large(Box<IndexSet<T, hashbrown::DefaultHashBuilder>>),
}

impl<T: Copy + Eq + Hash> Default for IdSet<T> {
    fn default() -> Self {
        IdSet::Small(Vec::new())
    }
}

impl<T: Copy + Eq + Hash> IdSet<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_vec(v: Vec<T>) -> Self {
        let mut s = Self::new();
        for x in v {
            s.insert(x);
        }
        s
    }

    #[inline]
    pub fn len(&self) -> usize {
        match self {
            IdSet::Small(v) => v.len(),
            IdSet::Large(s) => s.len(),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn contains(&self, x: T) -> bool {
        match self {
            IdSet::Small(v) => v.contains(&x),
            IdSet::Large(s) => s.contains(&x),
        }
    }

    /// Returns true if `x` was not present.
    pub fn insert(&mut self, x: T) -> bool {
        match self {
            IdSet::Small(v) => {
                if v.contains(&x) {
                    return false;
                }
                if v.len() >= PROMOTE_AT {
                    let mut s: IndexSet<T, hashbrown::DefaultHashBuilder> =
                        IndexSet::with_capacity_and_hasher(v.len() * 2, Default::default());
                    s.extend(v.iter().copied());
                    s.insert(x);
                    *self = IdSet::Large(Box::new(s));
                } else {
                    v.push(x);
                }
                true
            }
            IdSet::Large(s) => s.insert(x),
        }
    }

    /// Returns true if `x` was present. Order of the remaining members may change
    /// (swap-remove), deterministically.
    pub fn remove(&mut self, x: T) -> bool {
        match self {
            IdSet::Small(v) => match v.iter().position(|&y| y == x) {
                Some(i) => {
                    v.swap_remove(i);
                    true
                }
                None => false,
            },
            IdSet::Large(s) => s.swap_remove(&x),
        }
    }

    pub fn clear(&mut self) {
        *self = IdSet::Small(Vec::new());
    }

    /// Takes the members out, leaving the set empty.
    pub fn take(&mut self) -> Vec<T> {
        match std::mem::take(self) {
            IdSet::Small(v) => v,
            IdSet::Large(s) => s.into_iter().collect(),
        }
    }

    pub fn first(&self) -> Option<T> {
        match self {
            IdSet::Small(v) => v.first().copied(),
            IdSet::Large(s) => s.first().copied(),
        }
    }

    pub fn iter(&self) -> IdSetIter<'_, T> {
        match self {
            IdSet::Small(v) => IdSetIter::Small(v.iter()),
            IdSet::Large(s) => IdSetIter::Large(s.iter()),
        }
    }

    /// A copy of the members to iterate while mutating other state (no allocation for
    /// the usual handful).
    #[inline]
    pub fn to_vec(&self) -> SmallVec<[T; 4]> {
        match self {
            IdSet::Small(v) => SmallVec::from_slice(v),
            IdSet::Large(s) => s.iter().copied().collect(),
        }
    }
}

pub enum IdSetIter<'a, T> {
    Small(std::slice::Iter<'a, T>),
    Large(indexmap::set::Iter<'a, T>),
}

impl<T: Copy> Iterator for IdSetIter<'_, T> {
    type Item = T;
    #[inline]
    fn next(&mut self) -> Option<T> {
        match self {
            IdSetIter::Small(i) => i.next().copied(),
            IdSetIter::Large(i) => i.next().copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotes_and_keeps_members() {
        let mut s = IdSet::new();
        for i in 0..100u32 {
            assert!(s.insert(i));
            assert!(!s.insert(i));
        }
        assert!(matches!(s, IdSet::Large(_)));
        assert_eq!(s.len(), 100);
        for i in (0..100u32).step_by(2) {
            assert!(s.remove(i));
        }
        assert_eq!(s.len(), 50);
        assert!(s.contains(1) && !s.contains(2));
        let mut v = s.to_vec();
        v.sort();
        assert_eq!(
            v.as_slice(),
            (1..100).step_by(2).collect::<Vec<u32>>().as_slice()
        );
    }

    #[test]
    fn small_set_is_vector_sized() {
        assert!(std::mem::size_of::<IdSet<u32>>() <= 24);
    }
}
