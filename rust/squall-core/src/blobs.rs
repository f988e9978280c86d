//! Run specs with shared blobs cut out (docs/protocol.md#run-specs). The functions a
//! collection's task specs repeat (pickled once per graph, then copied into every spec)
//! travel once per graph in `update-graph`; a spec that had them is sent as
//!
//! ```text
//! 0x02 | u32 k | k × (u32 offset, u32 blob) | body
//! ```
//!
//! meaning: the original spec is the body with blob `blob` inserted at each `offset`
//! of the body (offsets non-decreasing). On arrival, the blob indices (the graph's
//! table) are rewritten to indices into the blob table of the task's group, which
//! holds each distinct blob once for as long as the group has tasks; the scheduler
//! stores the short spec, and each worker is sent a blob once (squall-wire's `compute`),
//! its specs' references naming the worker's cache. Nothing here reads inside a blob
//! or a body.

use std::sync::Arc;

/// First byte of a run spec whose blobs were cut out.
pub const BLOB_TAG: u8 = 2;

/// A shared part of many specs, held once per task group.
pub type Blob = Arc<[u8]>;

/// A spec with blobs cut out, read: its `(offset, blob)` entries and its body.
struct Holed<'a> {
    table: &'a [u8],
    body: &'a [u8],
}

/// None for a spec of another kind; an error naming what is malformed.
fn holes(spec: &[u8]) -> Option<Result<Holed<'_>, &'static str>> {
    let (&BLOB_TAG, rest) = spec.split_first()? else {
        return None;
    };
    Some(split(rest))
}

fn split(rest: &[u8]) -> Result<Holed<'_>, &'static str> {
    let (k, rest) = rest
        .split_first_chunk::<4>()
        .ok_or("blob count truncated")?;
    let k = u32::from_le_bytes(*k) as usize;
    let n = k
        .checked_mul(8)
        .filter(|&t| t <= rest.len())
        .ok_or("blob references truncated")?;
    let (table, body) = rest.split_at(n);
    Ok(Holed { table, body })
}

/// Whether a spec has blobs cut out (well formed or not).
pub fn is_holed(spec: &[u8]) -> bool {
    spec.first() == Some(&BLOB_TAG)
}

fn entries(table: &[u8]) -> impl Iterator<Item = (usize, u32)> + '_ {
    table.chunks_exact(8).map(|e| {
        let offset = u32::from_le_bytes(e[..4].try_into().expect("4 bytes"));
        (
            offset as usize,
            u32::from_le_bytes(e[4..].try_into().expect("4 bytes")),
        )
    })
}

/// A spec's blob references `(offset, blob)` and its body.
pub type References<'a> = (Vec<(usize, u32)>, &'a [u8]);

/// A spec's blob references `(offset, blob)`, offsets checked in order within the
/// body, and the body; None for a spec of another kind. Workers read the specs they are
/// sent, whose references name their blob cache's entries (docs/protocol.md#compute),
/// with it too.
pub fn references(spec: &[u8]) -> Option<Result<References<'_>, String>> {
    let parts = holes(spec)?;
    Some(
        parts
            .map_err(str::to_owned)
            .and_then(|Holed { table, body }| {
                let mut last = 0;
                let refs = entries(table)
                    .map(|(offset, blob)| {
                        if offset < last || offset > body.len() {
                            return Err(format!(
                                "blob offset {offset} out of order or past the body ({} bytes)",
                                body.len()
                            ));
                        }
                        last = offset;
                        Ok((offset, blob))
                    })
                    .collect::<Result<_, _>>()?;
                Ok((refs, body))
            }),
    )
}

/// Checks a spec's blob references against a table of `n_blobs` blobs: offsets in
/// order within the body, each blob index in range. Other specs pass.
pub fn check(spec: &[u8], n_blobs: usize) -> Result<(), String> {
    let Some(parts) = references(spec) else {
        return Ok(());
    };
    match parts?
        .0
        .into_iter()
        .find(|&(_, blob)| blob as usize >= n_blobs)
    {
        Some((_, blob)) => Err(format!(
            "blob reference {blob} out of range (the table has {n_blobs})"
        )),
        None => Ok(()),
    }
}

/// Rewrites the blob indices of a [`check`]ed spec through `map`.
pub fn remap(spec: &mut [u8], mut map: impl FnMut(u32) -> u32) {
    let k = u32::from_le_bytes(spec[1..5].try_into().expect("checked spec")) as usize;
    for e in spec[5..5 + 8 * k].chunks_exact_mut(8) {
        let blob = u32::from_le_bytes(e[4..].try_into().expect("4 bytes"));
        e[4..].copy_from_slice(&map(blob).to_le_bytes());
    }
}

/// The pieces of the original spec, in order (a spec of another kind is its one piece).
/// `blobs` is the table the spec's indices point into (checked against it).
pub fn pieces<'a>(spec: &'a [u8], blobs: &'a [Blob]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let Holed { table, body } = match holes(spec) {
        Some(Ok(parts)) => parts,
        _ => Holed {
            table: &[],
            body: spec,
        },
    };
    let mut at = 0;
    entries(table)
        .flat_map(move |(offset, blob)| {
            let before = &body[at..offset];
            at = offset;
            [before, &blobs[blob as usize][..]]
        })
        .chain(std::iter::once_with(move || {
            // The body after the last blob.
            &body[entries(table).last().map_or(0, |(offset, _)| offset)..]
        }))
}

/// The original spec's length.
pub fn len(spec: &[u8], blobs: &[Blob]) -> usize {
    pieces(spec, blobs).map(<[u8]>::len).sum()
}

/// The original spec, put back together.
pub fn join(spec: &[u8], blobs: &[Blob]) -> Vec<u8> {
    let mut out = Vec::with_capacity(len(spec, blobs));
    pieces(spec, blobs).for_each(|p| out.extend_from_slice(p));
    out
}
