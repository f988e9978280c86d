//! A small set of ids with deterministic iteration order.
//!
//! Most task-level sets are empty (a `map` task has no dependencies, dependents or
//! waiters), so a set is one pointer, null while empty: a task's three sets cost 24
//! bytes rather than 72 (docs/core.md#memory-per-task). A non-empty set holds up to
//! [`INLINE`] members inline in its one allocation; past that they spill to a vector,
//! and past [`PROMOTE_AT`] members (a hub task with thousands of dependents) the set
//! is promoted to an indexed hash set so that removal stays O(1). Iteration order
//! depends only on the sequence of operations, never on hash values.

use indexmap::IndexSet;
use smallvec::SmallVec;
use std::hash::Hash;

const PROMOTE_AT: usize = 32;
const INLINE: usize = 4;

#[derive(Clone, Debug)]
enum Repr<T: Copy + Eq + Hash> {
    Small(SmallVec<[T; INLINE]>),
    Large(Box<IndexSet<T, hashbrown::DefaultHashBuilder>>),
}

#[derive(Clone, Debug)]
pub struct IdSet<T: Copy + Eq + Hash>(Option<Box<Repr<T>>>);

impl<T: Copy + Eq + Hash> Default for IdSet<T> {
    fn default() -> Self {
        IdSet(None)
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
        match self.0.as_deref() {
            None => 0,
            Some(Repr::Small(v)) => v.len(),
            Some(Repr::Large(s)) => s.len(),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn contains(&self, x: T) -> bool {
        match self.0.as_deref() {
            None => false,
            Some(Repr::Small(v)) => v.contains(&x),
            Some(Repr::Large(s)) => s.contains(&x),
        }
    }

    /// Returns true if `x` was not present.
    pub fn insert(&mut self, x: T) -> bool {
        let repr = self
            .0
            .get_or_insert_with(|| Box::new(Repr::Small(SmallVec::new())));
        match &mut **repr {
            Repr::Small(v) => {
                if v.contains(&x) {
                    return false;
                }
                if v.len() >= PROMOTE_AT {
                    let mut s: IndexSet<T, hashbrown::DefaultHashBuilder> =
                        IndexSet::with_capacity_and_hasher(v.len() * 2, Default::default());
                    s.extend(v.iter().copied());
                    s.insert(x);
                    **repr = Repr::Large(Box::new(s));
                } else {
                    v.push(x);
                }
                true
            }
            Repr::Large(s) => s.insert(x),
        }
    }

    /// Returns true if `x` was present. Order of the remaining members may change
    /// (swap-remove), deterministically.
    pub fn remove(&mut self, x: T) -> bool {
        let removed = match self.0.as_deref_mut() {
            None => return false,
            Some(Repr::Small(v)) => match v.iter().position(|&y| y == x) {
                Some(i) => {
                    v.swap_remove(i);
                    true
                }
                None => false,
            },
            Some(Repr::Large(s)) => s.swap_remove(&x),
        };
        if removed && self.is_empty() {
            self.0 = None;
        }
        removed
    }

    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// Takes the members out, leaving the set empty.
    pub fn take(&mut self) -> Vec<T> {
        match self.0.take().map(|b| *b) {
            None => Vec::new(),
            Some(Repr::Small(v)) => v.into_vec(),
            Some(Repr::Large(s)) => s.into_iter().collect(),
        }
    }

    pub fn first(&self) -> Option<T> {
        match self.0.as_deref()? {
            Repr::Small(v) => v.first().copied(),
            Repr::Large(s) => s.first().copied(),
        }
    }

    pub fn iter(&self) -> IdSetIter<'_, T> {
        match self.0.as_deref() {
            None => IdSetIter::Small([].iter()),
            Some(Repr::Small(v)) => IdSetIter::Small(v.iter()),
            Some(Repr::Large(s)) => IdSetIter::Large(s.iter()),
        }
    }

    /// A copy of the members to iterate while mutating other state (no allocation for
    /// the usual handful).
    #[inline]
    pub fn to_vec(&self) -> SmallVec<[T; 4]> {
        match self.0.as_deref() {
            None => SmallVec::new(),
            Some(Repr::Small(v)) => SmallVec::from_slice(v),
            Some(Repr::Large(s)) => s.iter().copied().collect(),
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
        assert!(matches!(s.0.as_deref(), Some(Repr::Large(_))));
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
    fn empty_set_is_a_null_pointer() {
        assert_eq!(std::mem::size_of::<IdSet<u32>>(), 8);
        let mut s = IdSet::new();
        s.insert(7u32);
        assert!(s.remove(7));
        assert!(s.0.is_none(), "emptied sets free their allocation");
    }
}
