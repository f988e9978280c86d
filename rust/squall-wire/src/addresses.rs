//! Holder lists: a message names each holder by its u16 index into an address table
//! sent once in the frame header (`compute` dependencies, `who-has` replies).

use crate::error::{WireError, WireResult};
use crate::reader::Reader;
use rustc_hash::FxHashMap;
use std::hash::Hash;

/// The address table of one message, filled as holders are named; `K` identifies a
/// holder cheaply (the scheduler's worker id).
pub struct AddressTable<K> {
    addresses: Vec<String>,
    index: FxHashMap<K, u16>,
}

impl<K> Default for AddressTable<K> {
    fn default() -> Self {
        Self {
            addresses: Vec::new(),
            index: FxHashMap::default(),
        }
    }
}

impl<K: Hash + Eq> AddressTable<K> {
    /// The index of holder `k`, added with `address()` on first use.
    pub fn index(&mut self, k: K, address: impl FnOnce() -> String) -> u16 {
        *self.index.entry(k).or_insert_with(|| {
            self.addresses.push(address());
            (self.addresses.len() - 1) as u16
        })
    }

    pub fn into_addresses(self) -> Vec<String> {
        self.addresses
    }
}

/// Appends `u16 n | n × u16 index`.
pub(crate) fn put_holders(out: &mut Vec<u8>, holders: impl IntoIterator<Item = u16>) {
    let at = out.len();
    out.extend_from_slice(&[0; 2]);
    let mut n = 0usize;
    for h in holders {
        out.extend_from_slice(&h.to_le_bytes());
        n += 1;
    }
    out[at..at + 2].copy_from_slice(&(n as u16).to_le_bytes());
}

/// Reads `u16 n | n × u16 index`, resolving indices against `addresses`.
pub(crate) fn read_holders(r: &mut Reader<'_>, addresses: &[String]) -> WireResult<Vec<String>> {
    let n = r.u16("holder count")?.into();
    let n = r.count(n, 2, "holders")?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let i = usize::from(r.u16("holder index")?);
        let a = addresses.get(i).ok_or(WireError::BadIndex {
            what: "holder",
            index: i,
            len: addresses.len(),
        })?;
        out.push(a.clone());
    }
    Ok(out)
}
