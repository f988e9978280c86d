//! Memory bookkeeping of the machine (docs/runtime.md#memory): the bytes held in memory
//! and spilled, each key's recency, which keys are spilled, and pausing. The machine
//! never touches a disk: the caller writes values out, then swaps each for a handle
//! with `spilled`, and reads handles back itself.

use super::Machine;
use crate::keys::KeyId;

/// Totals over the values held: in memory (`managed`, their `sizeof`; `in_memory`,
/// how many) and spilled (`spilled_memory`, their `sizeof` before spilling;
/// `spilled_disk`, bytes on disk; `spilled`, how many).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    pub managed: i64,
    pub in_memory: usize,
    pub spilled_memory: i64,
    pub spilled_disk: i64,
    pub spilled: usize,
}

impl Memory {
    /// Adds (`sign` 1) or removes (-1) one held value of `nbytes`, spilled at `disk`.
    fn count(&mut self, nbytes: i64, spilled: Option<i64>, sign: i64) {
        match spilled {
            None => {
                self.managed += sign * nbytes;
                self.in_memory = (self.in_memory as i64 + sign) as usize;
            }
            Some(disk) => {
                self.spilled_memory += sign * nbytes;
                self.spilled_disk += sign * disk;
                self.spilled = (self.spilled as i64 + sign) as usize;
            }
        }
    }
}

impl<V, S> Machine<V, S> {
    /// Holds `value` (of `nbytes`) as `k`'s, in memory; a value held before goes.
    pub(super) fn store(&mut self, k: KeyId, value: V, nbytes: i64) {
        let old = self.unstore(k);
        self.graveyard.extend(old);
        let slot = self.keys.get_mut(k);
        slot.value = Some(value);
        slot.nbytes = nbytes;
        self.memory.count(nbytes, None, 1);
        self.touch(k);
    }

    /// Lets go of `k`'s value (or spill handle), if any.
    pub(super) fn unstore(&mut self, k: KeyId) -> Option<V> {
        let slot = self.keys.get_mut(k);
        let old = slot.value.take()?;
        let (nbytes, spilled) = (slot.nbytes, slot.take_spilled());
        slot.nbytes = 0;
        self.memory.count(nbytes, spilled, -1);
        Some(old)
    }

    /// `k` was used now (least recently used values spill first).
    pub(super) fn touch(&mut self, k: KeyId) {
        self.uses += 1;
        self.keys.get_mut(k).used = self.uses;
    }

    /// The value (or spill handle: the flag says) held for `key`, counted as a use.
    pub fn read(&mut self, key: &[u8]) -> Option<(&V, bool)> {
        let k = self.keys.find(key)?;
        self.keys.get(k).value.as_ref()?;
        self.touch(k);
        let slot = self.keys.get(k);
        Some((slot.value.as_ref()?, slot.spilled().is_some()))
    }

    pub fn memory(&self) -> Memory {
        self.memory
    }

    /// Keys whose values are in memory, least recently used first, until they add up
    /// to `nbytes` (all of them if they do not).
    pub fn spill_candidates(&self, nbytes: i64) -> Vec<KeyId> {
        let mut held: Vec<(u64, KeyId, i64)> = self
            .keys
            .iter()
            .filter(|(_, s)| s.value.is_some() && s.spilled().is_none())
            .map(|(k, s)| (s.used, k, s.nbytes))
            .collect();
        held.sort_unstable_by_key(|&(used, _, _)| used);
        let mut total = 0;
        let mut out = Vec::new();
        for (_, k, n) in held {
            if total >= nbytes {
                break;
            }
            total += n;
            out.push(k);
        }
        out
    }

    /// `k` (still named `key`) was written out as `disk` bytes: `handle` replaces its
    /// value if `same` says the value is still the one written (it may have been freed,
    /// recomputed or spilled since); otherwise the handle is given back (Err).
    pub fn spilled(
        &mut self,
        k: KeyId,
        key: &[u8],
        same: impl FnOnce(&V) -> bool,
        handle: V,
        disk: i64,
    ) -> Result<(), V> {
        let current = self.keys.try_get(k).is_some_and(|s| {
            &s.bytes[..] == key && s.spilled().is_none() && s.value.as_ref().is_some_and(same)
        });
        if !current {
            return Err(handle);
        }
        let slot = self.keys.get_mut(k);
        let old = slot.value.replace(handle);
        slot.with_rare(|r| r.spilled = Some(disk));
        let nbytes = slot.nbytes;
        self.memory.count(nbytes, None, -1);
        self.memory.count(nbytes, Some(disk), 1);
        self.graveyard.extend(old);
        Ok(())
    }

    /// Managed bytes above which a task thread spills before it takes the next task
    /// (`over_target`); None: never.
    pub fn set_spill_target(&mut self, target: Option<i64>) {
        self.spill_target = target;
    }

    /// More managed bytes than the spill target: spill before running more.
    pub fn over_target(&self) -> bool {
        self.spill_target.is_some_and(|t| self.memory.managed > t)
    }

    /// Paused, the machine starts no task (executing ones finish, rejoins are granted).
    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    /// The totals agree with the slots (`validate`).
    pub(super) fn validate_memory(&self) -> Result<(), String> {
        let mut want = Memory::default();
        for (k, s) in self.keys.iter() {
            if s.value.is_some() {
                want.count(s.nbytes, s.spilled(), 1);
            } else if s.spilled().is_some() || s.nbytes != 0 {
                return Err(format!("key {k:?}: no value, yet sized or spilled"));
            }
        }
        if want != self.memory {
            return Err(format!("memory {:?} != {want:?}", self.memory));
        }
        Ok(())
    }
}
