//! Hashes for the tables that hold one entry per task: the scheduler's key index, the
//! worker's keys and its task ids (docs/core.md#hashing-neighbours).
//!
//! A `map`'s keys are one name and token followed by the item's index in hex, and its
//! task ids are consecutive; a table reaches them in that order. Hashed uniformly,
//! each of ten million neighbours lands in a random bucket, so every insert and
//! lookup misses the caches. These hashes mix all of a key but the low four bits of
//! its last index (its last hex digit, or a tuple key's last int; the low four bits
//! of an id) and let those bits pick one of sixteen places in the run the rest names,
//! so sixteen neighbours share one run of buckets (two or three cache lines) while
//! runs are spread as well as by a uniform hash. The 7 top bits, which `hashbrown` compares
//! before the entries, also take the digit, so neighbours in one run still differ there.
//! Deterministic: no per-process seed.

use rustc_hash::FxBuildHasher;
use std::hash::{BuildHasher, Hasher};

const TOP: u64 = 0xFE00_0000_0000_0000;

/// MurmurHash3's 64-bit finalizer: every input bit moves about half the output bits
/// (FxHash alone leaves the low bits weak, and clusters consecutive inputs).
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    x = x.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    x ^ (x >> 33)
}

/// The hash of an entry in run `run` at place `low` (< 16) within it. The place is
/// offset by four bits of the run's own hash, so that entries which share `low` but
/// not their run (keys all ending in the same int, ids strided by 16) are spread over
/// all sixteen places, not piled on one.
fn place(run: u64, low: u64) -> u64 {
    let m = mix(run);
    (m & !0xF & !TOP) | ((m ^ low) & 0xF) | (((m >> 57) ^ low) << 57)
}

/// A key's bytes split into all but its last index and that index, where it has one:
/// a str key ending in a hex digit (`0`-`9`, `a`-`f`: the index is the digit, so a
/// run holds at most sixteen keys, each in a place of its own), or a key ending in an
/// int (a tuple key `(name, i)`: `I` then a zigzag varint, read backwards). Any other
/// key has no index and is hashed whole.
fn split_index(bytes: &[u8]) -> Option<(&[u8], u64)> {
    let (&last, rest) = bytes.split_last()?;
    if bytes[0] == b'S' {
        let digit = match last {
            b'0'..=b'9' => last - b'0',
            b'a'..=b'f' => last - b'a' + 10,
            _ => return None,
        };
        return Some((rest, u64::from(digit)));
    }
    if last & 0x80 != 0 {
        return None;
    }
    // The varint's other bytes have their high bit set; the tag precedes them.
    let start = bytes.len()
        - 1
        - rest
            .iter()
            .rev()
            .take(9)
            .take_while(|&&b| b & 0x80 != 0)
            .count();
    if start == 0 || bytes[start - 1] != b'I' {
        return None;
    }
    let v = bytes[start..]
        .iter()
        .rev()
        .fold(0u64, |v, &b| (v << 7) | u64::from(b & 0x7F));
    Some((&bytes[..start], (v >> 1) ^ (v & 1).wrapping_neg()))
}

/// The hash of a key's canonical bytes: keys that differ only in their last index
/// (items `16j` to `16j + 15` of a map, or of a tuple key's last int) hash into one
/// run of sixteen places; any other key is hashed uniformly.
pub fn neighbour_hash(bytes: &[u8]) -> u64 {
    match split_index(bytes) {
        Some((rest, i)) => place(FxBuildHasher.hash_one(rest) ^ (i >> 4), i & 0xF),
        None => mix(FxBuildHasher.hash_one(bytes)),
    }
}

/// The hash of a task id: ids `16j` to `16j + 15` hash into one run.
pub fn id_hash(id: u32) -> u64 {
    place(u64::from(id >> 4), u64::from(id & 0xF))
}

/// A `BuildHasher` for tables keyed by task ids (`u32`), hashing with [`id_hash`].
#[derive(Clone, Copy, Default)]
pub struct BuildIdHasher;

impl BuildHasher for BuildIdHasher {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// See [`BuildIdHasher`]; only `u32` keys.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, _: &[u8]) {
        unreachable!("IdHasher hashes u32 task ids only");
    }
    fn write_u32(&mut self, id: u32) {
        self.0 = id_hash(id);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests;
