//! Interned keys and what the worker knows about each: the value it holds, which local
//! task computes it, how many local tasks still need it and how it is being fetched.

use hashbrown::HashTable;

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

/// What a key rarely needs: dependents waiting for it, peers to fetch it from, calls
/// still running for freed tasks computing it, its size on disk. Kept apart (None: all
/// empty) so that a held result costs only the slot itself (docs/runtime.md#memory).
#[derive(Default)]
pub struct Rare {
    /// Tasks waiting for this key, as (task id, task instance); stale ones are skipped.
    pub waiters: Vec<(u32, u64)>,
    /// Peers that hold the key (fetches), this worker excluded.
    pub holders: Vec<String>,
    /// Calls still running for local tasks freed meanwhile that compute this key: the
    /// key stays (its id must not be reused) until they return.
    pub running: u32,
    /// Bytes on disk when `value` is a spill handle rather than the value itself.
    pub spilled: Option<i64>,
}

impl Rare {
    fn empty(&self) -> bool {
        self.waiters.is_empty()
            && self.holders.is_empty()
            && self.running == 0
            && self.spilled.is_none()
    }
}

pub struct Slot<V> {
    /// The key's canonical bytes: its only copy (the index hashes them here).
    pub bytes: Box<[u8]>,
    /// The local task (scheduler task id) computing or holding this key.
    pub task: Option<u32>,
    pub value: Option<V>,
    pub nbytes: i64,
    /// The machine's use counter when the value was last stored or read (recency for
    /// spilling least recently used values first).
    pub used: u64,
    /// Local tasks not yet finished that need this key as a dependency.
    pub users: u32,
    pub fetch: Fetch,
    /// A fetched copy the scheduler was told of (`add-replicas`).
    pub announced: bool,
    rare: Option<Box<Rare>>,
}

static NONE: Rare = Rare {
    waiters: Vec::new(),
    holders: Vec::new(),
    running: 0,
    spilled: None,
};

impl<V> Slot<V> {
    fn new(bytes: Box<[u8]>) -> Self {
        Self {
            bytes,
            task: None,
            value: None,
            nbytes: 0,
            used: 0,
            users: 0,
            fetch: Fetch::No,
            announced: false,
            rare: None,
        }
    }

    fn rare(&self) -> &Rare {
        self.rare.as_deref().unwrap_or(&NONE)
    }

    /// Changes the rare fields; the record goes again once they are all empty.
    pub fn with_rare<T>(&mut self, f: impl FnOnce(&mut Rare) -> T) -> T {
        let rare = self.rare.get_or_insert_with(Box::default);
        let out = f(rare);
        if rare.empty() {
            self.rare = None;
        }
        out
    }

    /// Whether any rare field is set (then the slot has a record of them).
    #[cfg(test)]
    pub(crate) fn has_rare(&self) -> bool {
        self.rare.is_some()
    }

    pub fn waiters(&self) -> &[(u32, u64)] {
        &self.rare().waiters
    }

    pub fn holders(&self) -> &[String] {
        &self.rare().holders
    }

    pub fn running(&self) -> u32 {
        self.rare().running
    }

    pub fn spilled(&self) -> Option<i64> {
        self.rare().spilled
    }

    /// The waiters, taken out.
    pub fn take_waiters(&mut self) -> Vec<(u32, u64)> {
        if self.waiters().is_empty() {
            return Vec::new();
        }
        self.with_rare(|r| std::mem::take(&mut r.waiters))
    }

    /// The bytes on disk if the value is spilled, taken out.
    pub fn take_spilled(&mut self) -> Option<i64> {
        self.spilled()?;
        self.with_rare(|r| r.spilled.take())
    }

    pub(crate) fn unused(&self) -> bool {
        self.task.is_none()
            && self.value.is_none()
            && self.users == 0
            && self.running() == 0
            && self.fetch != Fetch::InFlight
    }
}

/// Interned keys: slots by id, and an index over the slots' own bytes.
pub struct Keys<V> {
    slots: Vec<Option<Slot<V>>>,
    free: Vec<u32>,
    index: HashTable<KeyId>,
}

impl<V> Default for Keys<V> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
        }
    }
}

/// A map's neighbouring keys hash into one run of buckets (docs/core.md#hashing-neighbours).
fn hash(bytes: &[u8]) -> u64 {
    squall_hash::neighbour_hash(bytes)
}

/// The bytes of live key `k` in `slots`.
fn bytes_of<V>(slots: &[Option<Slot<V>>], k: KeyId) -> &[u8] {
    &slots[k.0 as usize]
        .as_ref()
        .expect("indexed keys are live")
        .bytes
}

impl<V> Keys<V> {
    pub fn find(&self, bytes: &[u8]) -> Option<KeyId> {
        let slots = &self.slots;
        self.index
            .find(hash(bytes), |&k| bytes_of(slots, k) == bytes)
            .copied()
    }

    /// Room for `n` more keys without growing (a batch's keys, say).
    pub fn reserve(&mut self, n: usize) {
        let slots = &self.slots;
        self.index.reserve(n, |&k| hash(bytes_of(slots, k)));
        self.slots.reserve(n.saturating_sub(self.free.len()));
    }

    /// The key's id, its slot made if new: from the bytes given (moved in if they
    /// are a `Vec`, rather than copied).
    pub fn intern<B: AsRef<[u8]> + Into<Box<[u8]>>>(&mut self, key: B) -> KeyId {
        let bytes = key.as_ref();
        let h = hash(bytes);
        let slots = &self.slots;
        if let Some(&k) = self.index.find(h, |&k| bytes_of(slots, k) == bytes) {
            return k;
        }
        let slot = Slot::new(key.into());
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
        let slots = &self.slots;
        self.index
            .insert_unique(h, k, |&k| hash(bytes_of(slots, k)));
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
        let Some(slot) = self.slots.get(k.0 as usize).and_then(Option::as_ref) else {
            return; // forgotten already
        };
        if !slot.unused() {
            return;
        }
        let h = hash(&slot.bytes);
        if let Ok(entry) = self.index.find_entry(h, |&x| x == k) {
            entry.remove();
        }
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
