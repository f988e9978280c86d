//! Two-sided links between a task and the few workers holding it (`who_has` ⇄
//! `has_what`) or clients wanting it (`who_wants` ⇄ `wants_what`). The task side keeps,
//! per link, the task's index in the other side's plain list, so adding or dropping a
//! link is O(1) on both sides without a large hash set per worker or client (those
//! were the ingest/release bottleneck). A task nearly always has one holder and at
//! most one wanter, kept inline: a link set is 16 bytes (docs/core.md#memory-per-task).

use crate::ids::{ClientId, TaskId, WorkerId};
use smallvec::SmallVec;

#[derive(Clone, Debug)]
pub struct Links<I>(Repr<I>);

#[derive(Clone, Debug)]
enum Repr<I> {
    Empty,
    One((I, u32)),
    /// Boxed so that a link set stays two words (several links are rare).
    #[allow(clippy::box_collection)]
    Many(Box<Vec<(I, u32)>>),
}

/// The workers holding a task's result.
pub type Holders = Links<WorkerId>;
/// The clients holding futures on a task.
pub type Wanters = Links<ClientId>;

impl<I> Default for Links<I> {
    fn default() -> Self {
        Links(Repr::Empty)
    }
}

/// Appends `t` to the other side's list, returning its index for the task's link.
pub(crate) fn push_back(list: &mut Vec<TaskId>, t: TaskId) -> u32 {
    list.push(t);
    (list.len() - 1) as u32
}

/// Removes index `pos` from the other side's list; returns the task moved into `pos`,
/// whose link must be repointed.
pub(crate) fn swap_out(list: &mut Vec<TaskId>, pos: u32) -> Option<TaskId> {
    list.swap_remove(pos as usize);
    list.get(pos as usize).copied()
}

impl<I: Copy + Eq> Links<I> {
    #[inline]
    fn as_slice(&self) -> &[(I, u32)] {
        match &self.0 {
            Repr::Empty => &[],
            Repr::One(link) => std::slice::from_ref(link),
            Repr::Many(v) => v,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        matches!(self.0, Repr::Empty)
    }

    #[inline]
    pub fn contains(&self, w: I) -> bool {
        self.as_slice().iter().any(|&(x, _)| x == w)
    }

    pub fn iter(&self) -> impl Iterator<Item = I> + '_ {
        self.as_slice().iter().map(|&(w, _)| w)
    }

    pub fn first(&self) -> Option<I> {
        self.as_slice().first().map(|&(w, _)| w)
    }

    /// A copy of the linked ids, to iterate while mutating other state. The usual
    /// none or one is built directly: smallvec's generic `collect` cost about 60
    /// instructions a call, several calls a transition.
    #[inline]
    pub fn to_vec(&self) -> SmallVec<[I; 4]> {
        match &self.0 {
            Repr::Empty => SmallVec::new(),
            Repr::One((w, _)) => SmallVec::from_buf_and_len([*w; 4], 1),
            Repr::Many(v) => v.iter().map(|&(w, _)| w).collect(),
        }
    }

    pub(crate) fn push(&mut self, w: I, pos: u32) {
        self.0 = match std::mem::replace(&mut self.0, Repr::Empty) {
            Repr::Empty => Repr::One((w, pos)),
            Repr::One(a) => Repr::Many(Box::new(vec![a, (w, pos)])),
            Repr::Many(mut v) => {
                v.push((w, pos));
                Repr::Many(v)
            }
        };
    }

    /// Drops `w`, returning the task's index in `w`'s list.
    pub(crate) fn remove(&mut self, w: I) -> Option<u32> {
        match &mut self.0 {
            Repr::Empty => None,
            Repr::One((x, pos)) => {
                let pos = *pos;
                (*x == w).then(|| {
                    self.0 = Repr::Empty;
                    pos
                })
            }
            Repr::Many(v) => {
                let i = v.iter().position(|&(x, _)| x == w)?;
                let pos = v.swap_remove(i).1;
                if let [last] = v.as_slice() {
                    self.0 = Repr::One(*last);
                }
                Some(pos)
            }
        }
    }

    pub(crate) fn position(&self, w: I) -> Option<u32> {
        self.as_slice()
            .iter()
            .find(|&&(x, _)| x == w)
            .map(|&(_, p)| p)
    }

    pub(crate) fn set_position(&mut self, w: I, pos: u32) {
        let links = match &mut self.0 {
            Repr::Empty => return,
            Repr::One(link) => std::slice::from_mut(link),
            Repr::Many(v) => v.as_mut_slice(),
        };
        if let Some(e) = links.iter_mut().find(|(x, _)| *x == w) {
            e.1 = pos;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_two_words_and_keep_positions() {
        assert_eq!(std::mem::size_of::<Holders>(), 16);
        let mut l = Holders::default();
        for i in 0..3 {
            l.push(WorkerId(i), 10 + i);
        }
        assert_eq!(l.remove(WorkerId(0)), Some(10));
        l.set_position(WorkerId(2), 5);
        assert_eq!(l.position(WorkerId(2)), Some(5));
        assert_eq!(l.remove(WorkerId(1)), Some(11));
        assert!(matches!(l.0, Repr::One((WorkerId(2), 5))));
        assert_eq!(l.remove(WorkerId(9)), None);
        assert_eq!(l.remove(WorkerId(2)), Some(5));
        assert!(l.is_empty());
    }
}
