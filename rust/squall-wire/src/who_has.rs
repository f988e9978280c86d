//! The `who-has` reply: per asked key in order, `u16 n | n × u16 index` into the
//! reply's address table (unknown keys: n = 0).

use crate::addresses::{put_holders, AddressTable};
use squall_core::{Key, Scheduler};

/// `(addresses, payload)` for `keys`.
pub fn encode_who_has(s: &Scheduler, keys: &[Key]) -> (Vec<String>, Vec<u8>) {
    let mut table = AddressTable::default();
    let mut out = Vec::with_capacity(keys.len() * 4);
    for k in keys {
        let holders = s.lookup(k).map(|t| &s.task(t).who_has);
        let indices = holders
            .into_iter()
            .flat_map(|h| h.iter())
            .map(|w| table.index(w, || s.worker(w).address.clone()));
        put_holders(&mut out, indices);
    }
    (table.into_addresses(), out)
}
