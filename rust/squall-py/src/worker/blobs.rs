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

/// A task's run spec: the body, with each cached blob inserted at its offset (none:
/// the body is the whole spec).
#[derive(Default)]
pub(super) struct Spec {
    body: Box<[u8]>,
    blobs: Box<[(usize, Arc<CachedBlob>)]>,
}

/// A spec as called: a call spec's function (from its cached blob) and pickled call,
/// or the whole spec.
pub(super) enum Parts<'a> {
    Call(Py<PyAny>, &'a [u8]),
    Whole(Cow<'a, [u8]>),
}

impl Spec {
    /// The whole spec, put back together if it holds blobs.
    fn whole(&self) -> Cow<'_, [u8]> {
        if self.blobs.is_empty() {
            return Cow::Borrowed(&self.body);
        }
        let mut out = Vec::with_capacity(
            self.body.len() + self.blobs.iter().map(|(_, b)| b.bytes.len()).sum::<usize>(),
        );
        let mut at = 0;
        for (offset, blob) in self.blobs.iter() {
            out.extend_from_slice(&self.body[at..*offset]);
            out.extend_from_slice(&blob.bytes);
            at = *offset;
        }
        out.extend_from_slice(&self.body[at..]);
        Cow::Owned(out)
    }

    /// Its parts; a call spec whose function is a cached blob (a `map`'s: the function
    /// cut out right after the tag and length) takes the function from the blob.
    pub(super) fn parts(&self, py: Python<'_>) -> PyResult<Parts<'_>> {
        if let [(5, blob)] = &self.blobs[..] {
            let len = self
                .body
                .get(1..5)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4")));
            if self.body[0] == CALL_TAG && len == Some(blob.bytes.len() as u32) {
                let f = blob
                    .function
                    .get_or_try_init(py, || load_function(py, &blob.bytes))?;
                return Ok(Parts::Call(f.clone_ref(py), &self.body[5..]));
            }
        }
        Ok(Parts::Whole(self.whole()))
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
                None => Spec {
                    body: t.spec.into(),
                    blobs: Box::default(),
                },
                Some(refs) => {
                    let (refs, body) = refs.map_err(PyValueError::new_err)?;
                    let blobs = (refs.into_iter())
                        .map(|(offset, id)| Ok((offset, lookup(id)?)))
                        .collect::<PyResult<_>>()?;
                    Spec {
                        body: body.into(),
                        blobs,
                    }
                }
            };
            out.push(TaskIn {
                id: t.task,
                run_id: t.run_id,
                key: t.key.as_bytes().to_vec(),
                priority: Priority {
                    neg_user: t.priority.neg_user,
                    generation: t.priority.generation,
                    order: t.priority.order,
                },
                spec,
                resources: t.resources,
                deps: (t.deps.into_iter())
                    .map(|d| DepIn {
                        key: d.key.as_bytes().to_vec(),
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
