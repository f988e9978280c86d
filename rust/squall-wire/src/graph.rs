//! `update-graph`: a client's graph, decoded straight into the core's new tasks.
//!
//! `keys | i64 spec sizes[n] | u32 dep offsets[n + 1] | u32 dep indices | specs`, where
//! `keys` (`keys_bytes` long, key-list form) holds the n task keys then the external
//! keys they depend on; task i depends on `indices[offsets[i]..offsets[i + 1]]`; an
//! index `>= n` names external key `index - n`; a spec size of -1 marks data (no spec).
//! `n` and `keys_bytes` travel in the frame header.

use crate::error::{WireError, WireResult};
use crate::keys::read_keys;
use crate::reader::Reader;
use squall_core::{DepRef, NewTask, RunSpec};
use std::sync::Arc;

pub fn decode_update_graph(
    payload: &[u8],
    n: usize,
    keys_bytes: usize,
) -> WireResult<Vec<NewTask>> {
    let keys = payload.get(..keys_bytes).ok_or(WireError::Truncated {
        what: "update-graph keys",
        needed: keys_bytes,
        left: payload.len(),
    })?;
    let mut keys = read_keys(keys)?;
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
                    .ok_or(WireError::BadIndex {
                        what: "dependency",
                        index: j,
                        len: n + external.len(),
                    })?
                    .clone(),
            ),
        });
    }
    let mut tasks = Vec::with_capacity(n);
    for (i, key) in keys.into_iter().enumerate() {
        let spec: Option<RunSpec> = match sizes[i] {
            -1 => None,
            len if len >= 0 => {
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                Some(Arc::from(r.take(len, "run spec")?))
            }
            len => return Err(WireError::NegativeSize(len)),
        };
        let ds = deps[offsets[i]..offsets[i + 1]].to_vec();
        tasks.push(NewTask::new(key, ds, spec));
    }
    r.finish()?;
    Ok(tasks)
}
