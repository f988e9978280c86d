//! Key lists (`encode_keys` form): each key as `u32 length | canonical key bytes`.

use crate::error::WireResult;
use crate::reader::Reader;
use squall_core::{Key, KeyRef};

/// Appends `u32 length | bytes`.
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Appends one key (canonical bytes, as [`KeyRef::as_bytes`](squall_core::KeyRef::as_bytes)).
pub fn put_key(out: &mut Vec<u8>, key: &[u8]) {
    put_bytes(out, key);
}

/// Canonical key bytes as a key list.
pub fn write_keys<'a>(keys: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for k in keys {
        put_key(&mut out, k);
    }
    out
}

/// The keys of a key list, each checked to be well formed.
pub fn read_keys(payload: &[u8]) -> WireResult<Vec<Key>> {
    Ok(read_key_refs(payload)?
        .into_iter()
        .map(ToOwned::to_owned)
        .collect())
}

/// The keys of a key list as [`read_keys`] checks them, left as the list's bytes.
pub(crate) fn read_key_refs(payload: &[u8]) -> WireResult<Vec<&KeyRef>> {
    let mut r = Reader::new(payload);
    let mut out = Vec::new();
    while !r.done() {
        out.push(KeyRef::of_encoded(r.key_bytes()?));
    }
    Ok(out)
}
