//! `compute`: the scheduler's task batch for one worker. Per task (little-endian):
//!
//! ```text
//! u32 task | u64 run_id | i32 −user priority | f64 generation | u32 order | u8 flags
//! | bytes key | bytes run spec | u16 n_resources × (str name, f64 amount)
//! | u32 n_deps × (bytes key, i64 nbytes, u16 n_holders × u16 address index)
//! ```
//!
//! where `bytes` = u32 length + bytes (keys in squall-core's canonical key encoding) and
//! holder addresses index the message's address table (sent in the frame header).

use crate::addresses::{put_holders, read_holders, AddressTable};
use crate::error::WireResult;
use crate::keys::put_bytes;
use crate::reader::Reader;
use squall_core::blobs::{self, Blob};
use squall_core::{Command, Key, Priority, Scheduler, TaskId, WorkerId};
use std::collections::BTreeMap;

const FLAG_ACTOR: u8 = 1;
/// The least bytes one resource or one dependency takes.
const MIN_RESOURCE: usize = 4 + 8;
const MIN_DEP: usize = 4 + 8 + 2;

/// One task of a `compute` payload, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeTask<'a> {
    pub task: u32,
    pub run_id: u64,
    pub priority: Priority,
    pub actor: bool,
    pub key: Key,
    pub spec: &'a [u8],
    pub resources: Vec<(String, f64)>,
    pub deps: Vec<ComputeDep>,
}

/// A dependency of a `compute` task: its key, size and holders' addresses.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeDep {
    pub key: Key,
    pub nbytes: i64,
    pub holders: Vec<String>,
}

/// A task to encode, borrowed from its owner; dependencies are given to [`put_task`].
pub struct TaskHead<'s> {
    pub task: u32,
    pub run_id: u64,
    pub priority: Priority,
    pub actor: bool,
    pub key: &'s [u8],
    /// The spec as stored, and the blob table its blob references point into
    /// (squall-core's `blobs`): the worker gets the spec put back together.
    pub spec: &'s [u8],
    pub blobs: &'s [Blob],
    pub resources: &'s [(String, f64)],
}

/// Appends one task; `deps` yields (key bytes, nbytes, holder indices into the
/// message's address table).
pub fn put_task<'s, H: IntoIterator<Item = u16>>(
    out: &mut Vec<u8>,
    t: &TaskHead<'_>,
    deps: impl IntoIterator<Item = (&'s [u8], i64, H)>,
) {
    out.extend_from_slice(&t.task.to_le_bytes());
    out.extend_from_slice(&t.run_id.to_le_bytes());
    out.extend_from_slice(&t.priority.neg_user.to_le_bytes());
    out.extend_from_slice(&t.priority.generation.to_le_bytes());
    out.extend_from_slice(&t.priority.order.to_le_bytes());
    out.push(if t.actor { FLAG_ACTOR } else { 0 });
    put_bytes(out, t.key);
    out.extend_from_slice(&(blobs::len(t.spec, t.blobs) as u32).to_le_bytes());
    blobs::pieces(t.spec, t.blobs).for_each(|p| out.extend_from_slice(p));
    out.extend_from_slice(&(t.resources.len() as u16).to_le_bytes());
    for (name, amount) in t.resources {
        put_bytes(out, name.as_bytes());
        out.extend_from_slice(&amount.to_le_bytes());
    }
    // u32: a reduction over a large map (`submit(sum, futures)`) has >65k inputs. The
    // count is written once the dependencies are.
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut n = 0usize;
    for (key, nbytes, holders) in deps {
        put_bytes(out, key);
        out.extend_from_slice(&nbytes.to_le_bytes());
        put_holders(out, holders);
        n += 1;
    }
    out[at..at + 4].copy_from_slice(&(n as u32).to_le_bytes());
}

/// Reads a whole `compute` payload, holder indices resolved against `addresses`.
pub fn decode_compute<'a>(
    payload: &'a [u8],
    addresses: &[String],
) -> WireResult<Vec<ComputeTask<'a>>> {
    let mut r = Reader::new(payload);
    let mut out = Vec::new();
    while !r.done() {
        let task = r.u32("task")?;
        let run_id = u64::from_le_bytes(r.arr("run id")?);
        let priority = Priority {
            neg_user: i32::from_le_bytes(r.arr("priority")?),
            generation: f64::from_le_bytes(r.arr("priority")?),
            order: r.u32("priority")?,
        };
        let [flags] = r.arr("flags")?;
        let key = r.key()?;
        let spec = r.bytes("run spec")?;
        let n = r.u16("resource count")?.into();
        let mut resources = Vec::with_capacity(r.count(n, MIN_RESOURCE, "resources")?);
        for _ in 0..n {
            let name = r.str("resource name")?.to_owned();
            resources.push((name, f64::from_le_bytes(r.arr("resource amount")?)));
        }
        let n = r.u32("dependency count")? as usize;
        let mut deps = Vec::with_capacity(r.count(n, MIN_DEP, "dependencies")?);
        for _ in 0..n {
            deps.push(ComputeDep {
                key: r.key()?,
                nbytes: i64::from_le_bytes(r.arr("dependency size")?),
                holders: read_holders(&mut r, addresses)?,
            });
        }
        out.push(ComputeTask {
            task,
            run_id,
            priority,
            actor: flags & FLAG_ACTOR != 0,
            key,
            spec,
            resources,
            deps,
        });
    }
    Ok(out)
}

/// One worker's share of a drained command batch.
pub struct ComputeBatch {
    pub addresses: Vec<String>,
    pub payload: Vec<u8>,
    pub count: usize,
}

#[derive(Default)]
struct Building {
    addresses: AddressTable<WorkerId>,
    payload: Vec<u8>,
    count: usize,
}

impl Building {
    fn push(&mut self, s: &Scheduler, t: TaskId, run_id: u64) {
        let ts = s.task(t);
        let head = TaskHead {
            task: t.0,
            run_id,
            priority: ts.priority,
            actor: ts.is_actor(),
            key: ts.key.as_bytes(),
            spec: ts.run_spec.as_deref().unwrap_or(&[]),
            blobs: &s.group(ts.group).blobs,
            resources: ts
                .restrictions()
                .map(|r| r.resources.as_slice())
                .unwrap_or(&[]),
        };
        let table = &mut self.addresses;
        let deps = ts.dependencies.iter().map(|d| {
            let dts = s.task(d);
            let holders: Vec<u16> = dts
                .who_has
                .iter()
                .map(|w| table.index(w, || s.worker(w).address.clone()))
                .collect();
            (dts.key.as_bytes(), dts.nbytes, holders)
        });
        put_task(&mut self.payload, &head, deps);
        self.count += 1;
    }
}

/// Groups the compute-task commands of a batch by worker and encodes each group.
/// A dispatch superseded within the batch (the task moved or was released since) is
/// skipped: its run id no longer matches.
pub fn encode_compute(s: &Scheduler, cmds: &[Command]) -> BTreeMap<WorkerId, ComputeBatch> {
    let mut building: BTreeMap<WorkerId, Building> = BTreeMap::new();
    for c in cmds {
        if let Command::ComputeTask {
            worker,
            task,
            run_id,
        } = *c
        {
            let current = s
                .get_task(task)
                .is_some_and(|ts| ts.run_id == run_id && ts.processing_on() == Some(worker));
            if current {
                building.entry(worker).or_default().push(s, task, run_id);
            }
        }
    }
    building
        .into_iter()
        .map(|(w, b)| {
            let batch = ComputeBatch {
                addresses: b.addresses.into_addresses(),
                payload: b.payload,
                count: b.count,
            };
            (w, batch)
        })
        .collect()
}
