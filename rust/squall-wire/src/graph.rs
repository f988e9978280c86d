//! `update-graph`: a client's graph, encoded by the client and decoded straight into the
//! core's new tasks. This is the one description of its layout:
//!
//! ```text
//! keys | i64 spec sizes[n] | u32 dep offsets[n + 1] | u32 dep indices
//!      | u32 n_blobs | u32 blob sizes[n_blobs] | blobs | specs
//! ```
//!
//! where `keys` (`keys_bytes` long, key-list form) holds the n task keys then the
//! external keys they depend on (keys of tasks from earlier graphs, in the order first
//! named); task i depends on `indices[offsets[i]..offsets[i + 1]]`; an index `>= n`
//! names external key `index - n`; the blobs are the graph's shared parts (functions
//! every spec repeats), each once; a spec size of -1 marks data (no spec); the specs
//! follow in task order, those that held blobs with them cut out (squall-core's
//! `blobs`: `0x02 | u32 k | k × (u32 offset, u32 blob) | body`, blob indices into this
//! table). `n` and `keys_bytes` travel in the frame header.

use crate::error::{WireError, WireResult};
use crate::keys::{put_key, read_key_refs};
use crate::reader::Reader;
use memchr::memmem::Finder;
use rustc_hash::FxHashMap;
use squall_core::blobs::{Blob, BLOB_TAG};
use squall_core::{DepRef, NewTask, TaskText};

/// An encoded graph, to be written out as its payload ([`write_to`](Self::write_to)
/// a buffer of [`size`](Self::size) bytes, such as the bytes object the binding fills, or
/// [`to_vec`](Self::to_vec)).
pub struct GraphPayload<'s> {
    pub n: usize,
    pub keys_bytes: usize,
    /// The task keys then the external keys, a key list.
    keys: Vec<u8>,
    offsets: Vec<u32>,
    indices: Vec<u32>,
    specs: &'s [Option<&'s [u8]>],
    blobs: &'s [&'s [u8]],
    /// `(spec, start, blob)`: blob `blob` found in spec `spec` at `start`, to be cut
    /// out; sorted, not overlapping.
    cuts: Vec<(u32, u32, u32)>,
    /// How many specs are sent with a blob header: those with cuts, and those starting
    /// with its tag (with no references), which would read as one otherwise.
    headers: usize,
}

/// Blobs this short are left in place: a reference (8 bytes) would save nothing.
const MIN_BLOB: usize = 9;

impl GraphPayload<'_> {
    /// The payload's length in bytes.
    pub fn size(&self) -> usize {
        let spec_bytes: usize = self.specs.iter().flatten().map(|s| s.len()).sum();
        let blob_bytes: usize = self.blobs.iter().map(|b| 4 + b.len()).sum();
        let saved: usize = self
            .cuts
            .iter()
            .map(|c| self.blobs[c.2 as usize].len() - 8)
            .sum();
        self.keys_bytes
            + 8 * self.n
            + 4 * (self.offsets.len() + self.indices.len())
            + 4
            + blob_bytes
            + spec_bytes
            + 5 * self.headers
            - saved
    }

    /// Spec `i` as sent, its cuts (`self.cuts[..]` from `*next`) taken.
    fn put_spec(&self, i: usize, spec: &[u8], next: &mut usize, out: &mut [u8]) -> usize {
        let start = *next;
        while *next < self.cuts.len() && self.cuts[*next].0 as usize == i {
            *next += 1;
        }
        let cuts = &self.cuts[start..*next];
        if cuts.is_empty() && spec.first() != Some(&BLOB_TAG) {
            out[..spec.len()].copy_from_slice(spec);
            return spec.len();
        }
        out[0] = BLOB_TAG;
        out[1..5].copy_from_slice(&as_u32(cuts.len()).to_le_bytes());
        let mut at = 5;
        let mut removed = 0;
        for &(_, start, blob) in cuts {
            // Offsets are into the body, where the blobs before this one are gone.
            out[at..at + 4].copy_from_slice(&(start - removed).to_le_bytes());
            out[at + 4..at + 8].copy_from_slice(&blob.to_le_bytes());
            at += 8;
            removed += as_u32(self.blobs[blob as usize].len());
        }
        let mut from = 0;
        for &(_, start, blob) in cuts {
            let piece = &spec[from..start as usize];
            out[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
            from = start as usize + self.blobs[blob as usize].len();
        }
        out[at..at + spec.len() - from].copy_from_slice(&spec[from..]);
        at + spec.len() - from
    }

    /// Writes the payload; `out` is [`size`](Self::size) bytes long.
    pub fn write_to(&self, out: &mut [u8]) {
        let (keys, rest) = out.split_at_mut(self.keys_bytes);
        keys.copy_from_slice(&self.keys);
        let (sizes, rest) = rest.split_at_mut(8 * self.n);
        let (offsets, rest) = rest.split_at_mut(4 * self.offsets.len());
        put_u32s(offsets, &self.offsets);
        let (indices, rest) = rest.split_at_mut(4 * self.indices.len());
        put_u32s(indices, &self.indices);
        let (count, rest) = rest.split_at_mut(4);
        count.copy_from_slice(&as_u32(self.blobs.len()).to_le_bytes());
        let (blob_sizes, mut rest) = rest.split_at_mut(4 * self.blobs.len());
        for (b, blob) in blob_sizes.chunks_exact_mut(4).zip(self.blobs) {
            b.copy_from_slice(&as_u32(blob.len()).to_le_bytes());
        }
        for blob in self.blobs {
            let (b, tail) = rest.split_at_mut(blob.len());
            b.copy_from_slice(blob);
            rest = tail;
        }
        let mut next = 0;
        for ((i, s), b) in self.specs.iter().enumerate().zip(sizes.chunks_exact_mut(8)) {
            let size = match s {
                None => -1,
                Some(s) => {
                    let len = self.put_spec(i, s, &mut next, rest);
                    rest = &mut std::mem::take(&mut rest)[len..];
                    i64::try_from(len).expect("spec size fits i64")
                }
            };
            b.copy_from_slice(&size.to_le_bytes());
        }
        assert!(
            rest.is_empty(),
            "update-graph: buffer longer than the payload"
        );
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0; self.size()];
        self.write_to(&mut out);
        out
    }
}

fn put_u32s(out: &mut [u8], xs: &[u32]) {
    for (b, x) in out.chunks_exact_mut(4).zip(xs) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

/// Encodes a graph. `specs[i]` is task `keys[i]`'s run spec (None: data); `deps` is
/// empty (no task has dependencies) or holds each task's dependencies, by key: a key
/// that is not one of `keys` becomes an external key; `blobs` are bytes the specs
/// share (the functions pickled once per graph), sent once and cut out of each spec
/// wherever they appear.
///
/// `put` appends a key's canonical bytes (as [`KeyRef::as_bytes`](squall_core::KeyRef::as_bytes))
/// to a buffer, so that the binding writes Python keys straight into it, with no
/// allocation per key; its first error is returned.
///
/// # Panics
///
/// If `specs` (or a non-empty `deps`) is not as long as `keys`, or the graph names more
/// than `u32::MAX` keys or dependencies.
pub fn encode_update_graph<'s, K, D: AsRef<[K]>, E>(
    keys: &[K],
    specs: &'s [Option<&'s [u8]>],
    deps: &[D],
    blobs: &'s [&'s [u8]],
    mut put: impl FnMut(&K, &mut Vec<u8>) -> Result<(), E>,
) -> Result<GraphPayload<'s>, E> {
    let n = keys.len();
    assert_eq!(specs.len(), n, "update-graph: one spec per task");
    assert!(
        deps.is_empty() || deps.len() == n,
        "update-graph: dependencies for every task or none"
    );
    let mut out = Vec::new();
    for k in keys {
        put_key_with(&mut out, k, &mut put)?;
    }
    let cuts = cuts(specs, blobs);
    let (external, indices) = if deps.iter().any(|d| !d.as_ref().is_empty()) {
        dependency_indices(&out, deps, &mut put)?
    } else {
        (Vec::new(), Vec::new())
    };
    out.extend_from_slice(&external);
    let mut offset = 0u32;
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(offset);
    for i in 0..n {
        offset += deps.get(i).map_or(0, |d| as_u32(d.as_ref().len()));
        offsets.push(offset);
    }
    Ok(GraphPayload {
        n,
        keys_bytes: out.len(),
        keys: out,
        offsets,
        indices,
        specs,
        blobs,
        headers: headers(specs, &cuts),
        cuts,
    })
}

/// How many specs get a blob header (see [`GraphPayload`]).
fn headers(specs: &[Option<&[u8]>], cuts: &[(u32, u32, u32)]) -> usize {
    let mut cut: Vec<u32> = cuts.iter().map(|c| c.0).collect();
    cut.dedup();
    let tagged = (0..)
        .zip(specs)
        .filter(|&(i, s)| {
            s.is_some_and(|s| s.first() == Some(&BLOB_TAG)) && cut.binary_search(&i).is_err()
        })
        .count();
    cut.len() + tagged
}

/// Where each blob appears in each spec: `(spec, start, blob)`, sorted, the first of
/// overlapping finds kept. Reassembly gives the spec's bytes back wherever a find is.
fn cuts(specs: &[Option<&[u8]>], blobs: &[&[u8]]) -> Vec<(u32, u32, u32)> {
    let finders: Vec<(u32, Finder<'_>)> = (0..)
        .zip(blobs)
        .filter(|(_, b)| b.len() >= MIN_BLOB)
        .map(|(i, b)| (i, Finder::new(b)))
        .collect();
    let mut out = Vec::new();
    let mut found = Vec::new();
    for (i, spec) in (0..).zip(specs) {
        let Some(spec) = spec else { continue };
        found.clear();
        for (b, finder) in &finders {
            found.extend(finder.find_iter(spec).map(|at| (as_u32(at), *b)));
        }
        found.sort_unstable();
        let mut end = 0;
        for &(start, b) in &found {
            if start as usize >= end {
                end = start as usize + blobs[b as usize].len();
                out.push((i, start, b));
            }
        }
    }
    out
}

/// Appends `u32 length | key bytes`, the bytes written by `put`.
fn put_key_with<K, E>(
    out: &mut Vec<u8>,
    key: &K,
    put: &mut impl FnMut(&K, &mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    put(key, out)?;
    let len = as_u32(out.len() - at - 4);
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// The external keys (a key list, in the order first named) and every dependency's
/// index into the task keys (`task_keys`, a key list) then the external keys.
fn dependency_indices<K, D: AsRef<[K]>, E>(
    task_keys: &[u8],
    deps: &[D],
    put: &mut impl FnMut(&K, &mut Vec<u8>) -> Result<(), E>,
) -> Result<(Vec<u8>, Vec<u32>), E> {
    let n = as_u32(deps.len());
    // A key given twice is the later task, as a dict built from the keys would say.
    let mut index =
        FxHashMap::<&[u8], u32>::with_capacity_and_hasher(deps.len(), Default::default());
    let mut rest = task_keys;
    for i in 0..n {
        let (len, tail) = rest.split_first_chunk::<4>().expect("n keys written");
        let (key, tail) = tail.split_at(u32::from_le_bytes(*len) as usize);
        index.insert(key, i);
        rest = tail;
    }
    let mut external_index = FxHashMap::<Box<[u8]>, u32>::default();
    let mut external = Vec::new();
    let mut indices = Vec::with_capacity(deps.iter().map(|d| d.as_ref().len()).sum());
    let mut key = Vec::new();
    for d in deps.iter().flat_map(AsRef::as_ref) {
        key.clear();
        put(d, &mut key)?;
        let j = if let Some(&j) = index.get(&key[..]) {
            j
        } else if let Some(&e) = external_index.get(&key[..]) {
            n + e
        } else {
            let e = as_u32(external_index.len());
            external_index.insert(key[..].into(), e);
            put_key(&mut external, &key);
            n + e
        };
        indices.push(j);
    }
    Ok((external, indices))
}

/// A count or position of the payload's u32 fields.
fn as_u32(x: usize) -> u32 {
    u32::try_from(x).expect("update-graph: more than u32::MAX keys or dependencies")
}

/// Decodes a graph encoded by [`encode_update_graph`] into the core's new tasks and
/// the graph's blobs (their references in the specs are checked by the core).
pub fn decode_update_graph(
    payload: &[u8],
    n: usize,
    keys_bytes: usize,
) -> WireResult<(Vec<NewTask>, Vec<Blob>)> {
    let keys = payload.get(..keys_bytes).ok_or(WireError::Truncated {
        what: "update-graph keys",
        needed: keys_bytes,
        left: payload.len(),
    })?;
    // The submitted keys are borrowed: each is copied once, into its task's text.
    let mut keys = read_key_refs(keys)?;
    if keys.len() < n {
        return Err(WireError::TooFewKeys {
            keys: keys.len(),
            tasks: n,
        });
    }
    let external = keys.split_off(n);
    let mut r = Reader::new(&payload[keys_bytes..]);
    // Sizes and offsets: 12 bytes per task, plus the first offset.
    r.count(n, 12, "tasks")?;
    let mut sizes = Vec::with_capacity(n);
    for _ in 0..n {
        sizes.push(i64::from_le_bytes(r.arr("spec size")?));
    }
    let mut offsets = Vec::with_capacity(n + 1);
    for _ in 0..=n {
        offsets.push(r.u32("dependency offset")? as usize);
    }
    if offsets[0] != 0 || offsets.windows(2).any(|w| w[0] > w[1]) {
        return Err(WireError::BadOffsets);
    }
    let n_deps = r.count(offsets[n], 4, "dependencies")?;
    let mut deps = Vec::with_capacity(n_deps);
    for _ in 0..n_deps {
        let j = r.u32("dependency index")? as usize;
        deps.push(match j.checked_sub(n) {
            None => DepRef::Local(j as u32),
            Some(e) => DepRef::Key(
                external
                    .get(e)
                    .copied()
                    .ok_or(WireError::BadIndex {
                        what: "dependency",
                        index: j,
                        len: n + external.len(),
                    })?
                    .to_owned(),
            ),
        });
    }
    let n_blobs = r.u32("blob count")? as usize;
    let mut blob_sizes = Vec::with_capacity(r.count(n_blobs, 4, "blobs")?);
    for _ in 0..n_blobs {
        blob_sizes.push(r.u32("blob size")? as usize);
    }
    let mut blobs = Vec::with_capacity(n_blobs);
    for size in blob_sizes {
        blobs.push(Blob::from(r.take(size, "blob")?));
    }
    let mut tasks = Vec::with_capacity(n);
    for (i, key) in keys.into_iter().enumerate() {
        let spec = match sizes[i] {
            -1 => None,
            len if len >= 0 => {
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                Some(r.take(len, "run spec")?)
            }
            len => return Err(WireError::NegativeSize(len)),
        };
        let ds = deps[offsets[i]..offsets[i + 1]].to_vec();
        tasks.push(NewTask::of_text(TaskText::new(key, spec), ds));
    }
    r.finish()?;
    Ok((tasks, blobs))
}
