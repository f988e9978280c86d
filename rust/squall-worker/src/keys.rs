//! Interned keys and what the worker knows about each: the value it holds, which local
//! task computes it, how many local tasks still need it and how it is being fetched.

use rustc_hash::FxHashMap;

/// Index of an interned key; reused once the key is forgotten.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// Not being fetched.
    No,
    /// Needed from a peer; waiting for the next fetch plan.
    Queued,
    /// Requested from a peer.
    InFlight,
}

pub struct Slot<V> {
    pub bytes: Box<[u8]>,
    /// The local task (scheduler task id) computing or holding this key.
    pub task: Option<u32>,
    pub value: Option<V>,
    pub nbytes: i64,
    /// Local tasks not yet finished that need this key as a dependency.
    pub users: u32,
    /// Tasks waiting for this key, as (task id, task instance); stale ones are skipped.
    pub waiters: Vec<(u32, u64)>,
    /// Calls still running for local tasks freed meanwhile that compute this key: the
    /// key stays (its id must not be reused) until they return.
    pub running: u32,
    pub fetch: Fetch,
    /// Peers that hold the key (fetches), this worker excluded.
    pub holders: Vec<String>,
    /// A fetched copy the scheduler was told of (`add-replicas`).
    pub announced: bool,
    /// The machine's use counter when the value was last stored or read (recency for
    /// spilling least recently used values first).
    pub used: u64,
    /// Bytes on disk when `value` is a spill handle rather than the value itself.
    pub spilled: Option<i64>,
}

impl<V> Slot<V> {
    fn new(bytes: Box<[u8]>) -> Self {
        Self {
            bytes,
            task: None,
            value: None,
            nbytes: 0,
            users: 0,
            waiters: Vec::new(),
            running: 0,
            fetch: Fetch::No,
            holders: Vec::new(),
            announced: false,
            used: 0,
            spilled: None,
        }
    }

    pub(crate) fn unused(&self) -> bool {
        self.task.is_none()
            && self.value.is_none()
            && self.users == 0
            && self.running == 0
            && self.fetch != Fetch::InFlight
    }
}

pub struct Keys<V> {
    slots: Vec<Option<Slot<V>>>,
    free: Vec<u32>,
    index: FxHashMap<Box<[u8]>, KeyId>,
}

impl<V> Default for Keys<V> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            index: FxHashMap::default(),
        }
    }
}

impl<V> Keys<V> {
    pub fn find(&self, bytes: &[u8]) -> Option<KeyId> {
        self.index.get(bytes).copied()
    }

    pub fn intern(&mut self, bytes: &[u8]) -> KeyId {
        if let Some(k) = self.find(bytes) {
            return k;
        }
        let boxed: Box<[u8]> = bytes.into();
        let slot = Slot::new(boxed.clone());
        let k = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                KeyId(i)
            }
            None => {
                self.slots.push(Some(slot));
                KeyId(self.slots.len() as u32 - 1)
            }
        };
        self.index.insert(boxed, k);
        k
    }

    pub fn try_get(&self, k: KeyId) -> Option<&Slot<V>> {
        self.slots.get(k.0 as usize).and_then(Option::as_ref)
    }

    pub fn get(&self, k: KeyId) -> &Slot<V> {
        self.slots[k.0 as usize].as_ref().expect("live key")
    }

    pub fn get_mut(&mut self, k: KeyId) -> &mut Slot<V> {
        self.slots[k.0 as usize].as_mut().expect("live key")
    }

    /// Forgets `k` if nothing refers to it any more.
    pub fn collect(&mut self, k: KeyId) {
        let Some(slot) = self.slots.get_mut(k.0 as usize).and_then(Option::as_mut) else {
            return; // forgotten already
        };
        if !slot.unused() {
            return;
        }
        if slot.users == 0 {
            slot.waiters.clear();
        }
        if slot.fetch == Fetch::Queued {
            slot.fetch = Fetch::No;
        }
        let bytes = std::mem::take(&mut slot.bytes);
        self.index.remove(&bytes);
        self.slots[k.0 as usize] = None;
        self.free.push(k.0);
    }

    pub fn iter(&self) -> impl Iterator<Item = (KeyId, &Slot<V>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (KeyId(i as u32), s)))
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}
