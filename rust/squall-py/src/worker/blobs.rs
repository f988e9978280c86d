//! The worker's blob cache (docs/protocol.md#compute): the blobs the scheduler sent
//! this worker, by the id its specs name them by, each kept once, and a task's spec
//! as its body and the cached blobs it holds. A function sent as a blob (a `map`'s) is
//! unpickled once per blob, not once per task.

use crate::specs::load_function;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use rustc_hash::FxHashMap;
use squall_core::blobs;
use squall_wire::compute::Compute;
use squall_wire::spec::CALL_TAG;
use squall_worker::{DepIn, Priority, TaskIn};
use std::borrow::Cow;
use std::sync::Arc;

/// One blob, and the function it pickles once a call spec has called it.
pub(super) struct CachedBlob {
    bytes: Box<[u8]>,
    function: PyOnceLock<Py<PyAny>>,
}

/// A task's run spec, as held until it runs.
pub(super) enum Spec {
    /// The whole spec (it names no blob).
    Whole(Box<[u8]>),
    /// A call spec whose function is a cached blob (a `map`'s: the function cut out
    /// right after the tag and length): the blob and the pickled call.
    Call(Arc<CachedBlob>, Box<[u8]>),
    /// Any other spec naming blobs: its body, and each blob with the offset in the
    /// body where it goes.
    Holed(Box<[u8]>, Box<[(usize, Arc<CachedBlob>)]>),
}

impl Default for Spec {
    fn default() -> Self {
        Self::Whole(Box::default())
    }
}

/// A spec as called: a call spec's function (from its cached blob) and pickled call,
/// or the whole spec.
pub(super) enum Parts<'a> {
    Call(Py<PyAny>, &'a [u8]),
    Whole(Cow<'a, [u8]>),
}

impl Spec {
    /// A spec read off the wire, its blobs `(offset, blob)` looked up already.
    fn new(body: &[u8], blobs: Vec<(usize, Arc<CachedBlob>)>) -> Self {
        match <[_; 1]>::try_from(blobs) {
            Ok([(5, blob)]) if Self::calls(body, &blob) => Self::Call(blob, body[5..].into()),
            Ok(one) => Self::Holed(body.into(), Box::new(one)),
            Err(blobs) if blobs.is_empty() => Self::Whole(body.into()),
            Err(blobs) => Self::Holed(body.into(), blobs.into()),
        }
    }

    /// Whether `body` with `blob` inserted at offset 5 is a call spec whose function
    /// is the blob.
    fn calls(body: &[u8], blob: &CachedBlob) -> bool {
        let len = body
            .get(1..5)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")));
        body.first() == Some(&CALL_TAG) && len == Some(blob.bytes.len() as u32)
    }

    /// Its parts; a call spec whose function is a cached blob takes the function from
    /// the blob, unpickled once.
    pub(super) fn parts(&self, py: Python<'_>) -> PyResult<Parts<'_>> {
        match self {
            Self::Call(blob, call) => {
                let f = blob
                    .function
                    .get_or_try_init(py, || load_function(py, &blob.bytes))?;
                Ok(Parts::Call(f.clone_ref(py), call))
            }
            Self::Whole(spec) => Ok(Parts::Whole(Cow::Borrowed(spec))),
            Self::Holed(body, blobs) => {
                let len = body.len() + blobs.iter().map(|(_, b)| b.bytes.len()).sum::<usize>();
                let mut out = Vec::with_capacity(len);
                let mut at = 0;
                for (offset, blob) in blobs.iter() {
                    out.extend_from_slice(&body[at..*offset]);
                    out.extend_from_slice(&blob.bytes);
                    at = *offset;
                }
                out.extend_from_slice(&body[at..]);
                Ok(Parts::Whole(Cow::Owned(out)))
            }
        }
    }
}

/// The blobs this worker holds, as the scheduler sent them.
#[derive(Default)]
pub(super) struct BlobCache {
    by_id: FxHashMap<u32, Arc<CachedBlob>>,
}

/// A `compute` batch read against the cache, not yet applied to it.
pub(super) struct Resolved {
    tasks: Vec<TaskIn<Spec>>,
    dropped: Vec<u32>,
    added: Vec<(u32, Arc<CachedBlob>)>,
}

impl BlobCache {
    /// The batch's tasks with their specs' blobs looked up: among the blobs the batch
    /// adds, then those held and not dropped by it. Any unknown id refuses the whole
    /// batch, leaving the cache as it was.
    pub(super) fn resolve(&self, batch: Compute<'_>) -> PyResult<Resolved> {
        let Compute {
            mut dropped,
            added,
            tasks,
        } = batch;
        dropped.sort_unstable();
        if let Some(id) = dropped.iter().find(|id| !self.by_id.contains_key(id)) {
            return Err(PyValueError::new_err(format!(
                "dropped blob {id} is not held"
            )));
        }
        let added: Vec<(u32, Arc<CachedBlob>)> = (added.into_iter())
            .map(|(id, bytes)| {
                let blob = CachedBlob {
                    bytes: bytes.into(),
                    function: PyOnceLock::new(),
                };
                (id, Arc::new(blob))
            })
            .collect();
        let new: FxHashMap<u32, &Arc<CachedBlob>> = added.iter().map(|(id, b)| (*id, b)).collect();
        let lookup = |id: u32| -> PyResult<Arc<CachedBlob>> {
            let held = || {
                (dropped.binary_search(&id).is_err())
                    .then(|| self.by_id.get(&id))
                    .flatten()
            };
            match new.get(&id).copied().or_else(held) {
                Some(b) => Ok(b.clone()),
                None => Err(PyValueError::new_err(format!(
                    "a spec names blob {id}, which this worker does not hold"
                ))),
            }
        };
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            let spec = match blobs::references(t.spec) {
                None => Spec::Whole(t.spec.into()),
                Some(refs) => {
                    let (refs, body) = refs.map_err(PyValueError::new_err)?;
                    let blobs = (refs.into_iter())
                        .map(|(offset, id)| Ok((offset, lookup(id)?)))
                        .collect::<PyResult<_>>()?;
                    Spec::new(body, blobs)
                }
            };
            out.push(TaskIn {
                id: t.task,
                run_id: t.run_id,
                key: t.key.to_vec(),
                priority: Priority {
                    neg_user: t.priority.neg_user,
                    generation: t.priority.generation,
                    order: t.priority.order,
                },
                spec,
                resources: t.resources,
                deps: (t.deps.into_iter())
                    .map(|d| DepIn {
                        key: d.key.to_vec(),
                        holders: d.holders,
                    })
                    .collect(),
            });
        }
        drop(new);
        Ok(Resolved {
            tasks: out,
            dropped,
            added,
        })
    }

    /// Applies a resolved batch's drops and additions; returns its tasks and the blobs
    /// let go of (to be freed without the machine's lock: a function may hold anything).
    pub(super) fn apply(&mut self, r: Resolved) -> (Vec<TaskIn<Spec>>, Vec<Arc<CachedBlob>>) {
        let gone = (r.dropped.iter())
            .filter_map(|id| self.by_id.remove(id))
            .collect();
        self.by_id.extend(r.added);
        (r.tasks, gone)
    }

    /// Forgets every blob: a new connection's scheduler names blobs anew.
    pub(super) fn clear(&mut self) -> Vec<Arc<CachedBlob>> {
        self.by_id.drain().map(|(_, b)| b).collect()
    }

    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }
}
