//! The record of executing tasks that a nanny reads after its worker process died, so
//! that only those tasks count as suspects (docs/runtime.md#supervision-the-nanny).
//!
//! A small file shared by memory map: slot 0 counts executions that found no free slot
//! (the record is then incomplete), slots 1.. hold `task id + 1` of each running call
//! (0 = free), little-endian u64. The worker writes it under its machine's lock as calls
//! start and end; the writes land in the page cache, so they outlive the process.

use memmap2::MmapMut;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use std::fs::OpenOptions;

/// Bytes of a record file: one page, 511 call slots.
pub const RECORD_BYTES: usize = 4096;
const SLOT: usize = 8;

pub struct ExecutingRecord {
    map: MmapMut,
    free: Vec<usize>,
}

/// Where a call's entry went: a slot, or the overflow count.
#[derive(Clone, Copy)]
pub enum Entry {
    Slot(usize),
    Overflow,
}

impl ExecutingRecord {
    /// Maps `path` (made and sized by the nanny) and clears it.
    pub fn open(path: &str) -> PyResult<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| PyOSError::new_err(format!("executing record {path}: {e}")))?;
        file.set_len(RECORD_BYTES as u64)
            .map_err(|e| PyOSError::new_err(format!("executing record {path}: {e}")))?;
        // SAFETY: the file is private to this worker and its nanny, which reads it only
        // once this process has ended; nothing truncates it while it is mapped.
        let mut map = unsafe { MmapMut::map_mut(&file) }
            .map_err(|e| PyOSError::new_err(format!("executing record {path}: {e}")))?;
        map.fill(0);
        let free = (1..RECORD_BYTES / SLOT).rev().collect();
        Ok(Self { map, free })
    }

    pub fn enter(&mut self, task: u32) -> Entry {
        match self.free.pop() {
            Some(slot) => {
                self.write(slot, u64::from(task) + 1);
                Entry::Slot(slot)
            }
            None => {
                self.write(0, self.read(0) + 1);
                Entry::Overflow
            }
        }
    }

    pub fn leave(&mut self, entry: Entry) {
        match entry {
            Entry::Slot(slot) => {
                self.write(slot, 0);
                self.free.push(slot);
            }
            Entry::Overflow => self.write(0, self.read(0).saturating_sub(1)),
        }
    }

    fn read(&self, slot: usize) -> u64 {
        let bytes = &self.map[slot * SLOT..(slot + 1) * SLOT];
        u64::from_le_bytes(bytes.try_into().expect("slots are 8 bytes"))
    }

    fn write(&mut self, slot: usize, value: u64) {
        self.map[slot * SLOT..(slot + 1) * SLOT].copy_from_slice(&value.to_le_bytes());
    }
}

/// The task ids a record names as executing, or None when it is incomplete (calls
/// overflowed its slots) or not a record.
#[pyfunction]
pub fn read_executing_record(data: &[u8]) -> Option<Vec<u32>> {
    if data.len() != RECORD_BYTES {
        return None;
    }
    let mut slots = data
        .chunks_exact(SLOT)
        .map(|c| u64::from_le_bytes(c.try_into().expect("chunks are 8 bytes")));
    if slots.next() != Some(0) {
        return None;
    }
    slots
        .filter(|&v| v != 0)
        .map(|v| u32::try_from(v - 1).ok())
        .collect()
}
