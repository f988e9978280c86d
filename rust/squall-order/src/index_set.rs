//! A set of node indices with O(1) insert, remove, membership and iteration.

const NONE: u32 = u32::MAX;

pub(crate) struct IndexSet {
    items: Vec<u32>,
    pos: Vec<u32>,
}

impl IndexSet {
    pub(crate) fn new(n: usize) -> Self {
        IndexSet {
            items: Vec::new(),
            pos: vec![NONE; n],
        }
    }

    #[inline]
    pub(crate) fn contains(&self, k: u32) -> bool {
        self.pos[k as usize] != NONE
    }

    #[inline]
    pub(crate) fn insert(&mut self, k: u32) {
        if !self.contains(k) {
            self.pos[k as usize] = self.items.len() as u32;
            self.items.push(k);
        }
    }

    #[inline]
    pub(crate) fn remove(&mut self, k: u32) {
        let p = self.pos[k as usize];
        if p != NONE {
            let last = self.items.pop().expect("a member exists");
            if last != k {
                self.items[p as usize] = last;
                self.pos[last as usize] = p;
            }
            self.pos[k as usize] = NONE;
        }
    }

    pub(crate) fn clear(&mut self) {
        for &k in &self.items {
            self.pos[k as usize] = NONE;
        }
        self.items.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(crate) fn as_slice(&self) -> &[u32] {
        &self.items
    }
}
