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
//!
//! The tasks follow the blob section, which keeps the worker's blob cache in step:
//!
//! ```text
//! u32 n_dropped | u32 dropped[n_dropped] | u32 n_added | n_added × (u32 id, bytes blob)
//! ```
//!
//! A spec with blobs cut out (squall-core's `blobs` form) names the worker's cache
//! entries: the scheduler sends each blob to a worker once and tells it which to drop
//! ([`SentBlobs`], docs/protocol.md#compute).

use crate::addresses::{put_holders, read_holders, AddressTable};
use crate::error::WireResult;
use crate::keys::put_bytes;
use crate::reader::Reader;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use squall_core::blobs::{self, Blob};
use squall_core::{Command, Priority, Scheduler, TaskId, WorkerId};
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

const FLAG_ACTOR: u8 = 1;
/// The least bytes one resource or one dependency takes.
const MIN_RESOURCE: usize = 4 + 8;
const MIN_DEP: usize = 4 + 8 + 2;
/// The least bytes one task takes (a one-byte key, an empty spec, nothing else).
const MIN_TASK: usize = 4 + 8 + 4 + 8 + 4 + 1 + (4 + 1) + 4 + 2 + 4;

/// What a worker may hold of the blobs sent to it: beyond either bound the blobs used
/// least recently (and not by the batch being built) are dropped.
pub const MAX_HELD_BLOBS: usize = 4096;
pub const MAX_HELD_BLOB_BYTES: usize = 64 << 20;
/// Blobs no task group holds any more are dropped when a batch adds blobs (a new graph
/// is running), and at least every this many batches.
const SWEEP_EVERY: u64 = 64;
/// Ids start over (everything dropped first) before they could wrap.
const MAX_ID: u32 = 1 << 31;

/// A `compute` payload, decoded: the blob section, then the tasks.
#[derive(Clone, Debug, PartialEq)]
pub struct Compute<'a> {
    /// Ids of cache entries to drop, applied before `added`.
    pub dropped: Vec<u32>,
    /// Blobs new to the worker, by the id the specs name them by.
    pub added: Vec<(u32, &'a [u8])>,
    pub tasks: Vec<ComputeTask<'a>>,
}

/// One task of a `compute` payload, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeTask<'a> {
    pub task: u32,
    pub run_id: u64,
    pub priority: Priority,
    pub actor: bool,
    /// Canonical key bytes (checked well formed), borrowed from the payload.
    pub key: &'a [u8],
    pub spec: &'a [u8],
    pub resources: Vec<(String, f64)>,
    pub deps: Vec<ComputeDep<'a>>,
}

/// A dependency of a `compute` task: its key, size and holders' addresses.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeDep<'a> {
    /// Canonical key bytes (checked well formed), borrowed from the payload.
    pub key: &'a [u8],
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
    /// The spec as the worker gets it (blob references naming its cache's entries).
    pub spec: &'s [u8],
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
    put_bytes(out, t.spec);
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
pub fn decode_compute<'a>(payload: &'a [u8], addresses: &[String]) -> WireResult<Compute<'a>> {
    decode_compute_of(payload, addresses, 0)
}

/// [`decode_compute`] of a payload whose header announces `n` tasks: room is made for
/// them at once (for no more than its bytes could hold), rather than by growing.
pub fn decode_compute_of<'a>(
    payload: &'a [u8],
    addresses: &[String],
    n: usize,
) -> WireResult<Compute<'a>> {
    let announced = n;
    let mut r = Reader::new(payload);
    let n = r.u32("dropped blob count")? as usize;
    let mut dropped = Vec::with_capacity(r.count(n, 4, "dropped blobs")?);
    for _ in 0..n {
        dropped.push(r.u32("dropped blob")?);
    }
    let n = r.u32("blob count")? as usize;
    let mut added = Vec::with_capacity(r.count(n, 8, "blobs")?);
    for _ in 0..n {
        added.push((r.u32("blob id")?, r.bytes("blob")?));
    }
    let mut tasks = Vec::with_capacity(announced.min(r.left() / MIN_TASK));
    while !r.done() {
        let task = r.u32("task")?;
        let run_id = u64::from_le_bytes(r.arr("run id")?);
        let priority = Priority {
            neg_user: i32::from_le_bytes(r.arr("priority")?),
            generation: f64::from_le_bytes(r.arr("priority")?),
            order: r.u32("priority")?,
        };
        let [flags] = r.arr("flags")?;
        let key = r.key_bytes()?;
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
                key: r.key_bytes()?,
                nbytes: i64::from_le_bytes(r.arr("dependency size")?),
                holders: read_holders(&mut r, addresses)?,
            });
        }
        tasks.push(ComputeTask {
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
    Ok(Compute {
        dropped,
        added,
        tasks,
    })
}

/// One worker's share of a drained command batch.
pub struct ComputeBatch {
    pub addresses: Vec<String>,
    pub payload: Vec<u8>,
    pub count: usize,
}

/// The blobs one worker holds, as the scheduler sent them (docs/protocol.md#compute).
/// Messages to a worker arrive in order, so this is exactly what the worker's cache
/// holds when it reads the next batch: a spec never names a blob the worker lacks. A
/// worker that connects again is a new worker here, with a new, empty record (its
/// cache starts over too).
#[derive(Default)]
pub struct SentBlobs {
    /// By the blob's address: the `Weak` keeps the allocation, so no other blob can
    /// take that address while it is held here.
    held: FxHashMap<usize, Held>,
    next_id: u32,
    bytes: usize,
    /// Batches built so far: the clock of least recent use.
    batch: u64,
}

struct Held {
    id: u32,
    blob: Weak<[u8]>,
    len: usize,
    used: u64,
}

impl SentBlobs {
    /// The worker's id for `blob`; a blob new to it is added to `added`.
    fn id(&mut self, blob: &Blob, added: &mut Vec<(u32, Blob)>) -> u32 {
        let at = Arc::as_ptr(blob).cast::<u8>() as usize;
        let batch = self.batch;
        if let Some(h) = self.held.get_mut(&at) {
            h.used = batch;
            return h.id;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.bytes += blob.len();
        let held = Held {
            id,
            blob: Arc::downgrade(blob),
            len: blob.len(),
            used: batch,
        };
        self.held.insert(at, held);
        added.push((id, blob.clone()));
        id
    }

    /// Before a batch: ids start over if they might run out.
    fn begin(&mut self, dropped: &mut Vec<u32>) {
        self.batch += 1;
        if self.next_id >= MAX_ID {
            dropped.extend(self.held.drain().map(|(_, h)| h.id));
            self.bytes = 0;
            self.next_id = 0;
        }
    }

    /// After a batch (which `added` to the worker's blobs or not): the blobs no task
    /// group holds any more, and beyond the bounds the least recently used (never one
    /// this batch uses).
    fn settle(&mut self, added: bool, dropped: &mut Vec<u32>) {
        let over = |s: &Self| s.held.len() > MAX_HELD_BLOBS || s.bytes > MAX_HELD_BLOB_BYTES;
        if added || self.batch.is_multiple_of(SWEEP_EVERY) || over(self) {
            let bytes = &mut self.bytes;
            self.held.retain(|_, h| {
                let live = h.blob.strong_count() > 0;
                if !live {
                    dropped.push(h.id);
                    *bytes -= h.len;
                }
                live
            });
        }
        if over(self) {
            let batch = self.batch;
            let mut old: Vec<(u64, usize)> = (self.held.iter())
                .filter(|(_, h)| h.used < batch)
                .map(|(&at, h)| (h.used, at))
                .collect();
            old.sort_unstable();
            for (_, at) in old {
                if !over(self) {
                    break;
                }
                let h = self.held.remove(&at).expect("listed above");
                dropped.push(h.id);
                self.bytes -= h.len;
            }
        }
    }

    /// How many blobs the worker holds now.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// Appends a blob section.
pub fn put_blob_section(out: &mut Vec<u8>, dropped: &[u32], added: &[(u32, &[u8])]) {
    out.extend_from_slice(&(dropped.len() as u32).to_le_bytes());
    dropped
        .iter()
        .for_each(|id| out.extend_from_slice(&id.to_le_bytes()));
    out.extend_from_slice(&(added.len() as u32).to_le_bytes());
    for (id, blob) in added {
        out.extend_from_slice(&id.to_le_bytes());
        put_bytes(out, blob);
    }
}

/// An empty blob section: how a payload whose blobs the worker holds all begins.
pub const NO_BLOBS: [u8; 8] = [0; 8];

struct Building {
    addresses: AddressTable<WorkerId>,
    /// Begins with [`NO_BLOBS`], replaced at the end if the batch drops or adds any.
    payload: Vec<u8>,
    count: usize,
    sent: SentBlobs,
    dropped: Vec<u32>,
    added: Vec<(u32, Blob)>,
    /// A spec with its blob references rewritten to the worker's ids.
    scratch: Vec<u8>,
}

impl Building {
    fn new(mut sent: SentBlobs) -> Self {
        let mut dropped = Vec::new();
        sent.begin(&mut dropped);
        Self {
            addresses: AddressTable::default(),
            payload: NO_BLOBS.to_vec(),
            count: 0,
            sent,
            dropped,
            added: Vec::new(),
            scratch: Vec::new(),
        }
    }

    fn push(&mut self, s: &Scheduler, t: TaskId, run_id: u64) {
        let ts = s.task(t);
        let stored = ts.run_spec().unwrap_or_default();
        let spec = if blobs::is_holed(stored) {
            let table = &s.group(ts.group).blobs;
            let (sent, added) = (&mut self.sent, &mut self.added);
            self.scratch.clear();
            self.scratch.extend_from_slice(stored);
            blobs::remap(&mut self.scratch, |i| sent.id(&table[i as usize], added));
            &self.scratch[..]
        } else {
            stored
        };
        let head = TaskHead {
            task: t.0,
            run_id,
            priority: ts.priority,
            actor: ts.is_actor(),
            key: ts.key().as_bytes(),
            spec,
            resources: ts
                .restrictions()
                .map(|r| r.resources.as_slice())
                .unwrap_or(&[]),
        };
        let table = &mut self.addresses;
        let deps = ts.dependencies.iter().map(|d| {
            let dts = s.task(d);
            // Inline: a dependency has few holders, and this runs per dependency.
            let holders: SmallVec<[u16; 4]> = dts
                .who_has
                .iter()
                .map(|w| table.index(w, || s.worker(w).address.clone()))
                .collect();
            (dts.key().as_bytes(), dts.nbytes, holders)
        });
        put_task(&mut self.payload, &head, deps);
        self.count += 1;
    }

    fn finish(mut self) -> (ComputeBatch, SentBlobs) {
        self.sent.settle(!self.added.is_empty(), &mut self.dropped);
        let payload = if self.dropped.is_empty() && self.added.is_empty() {
            self.payload
        } else {
            let added: Vec<(u32, &[u8])> = self.added.iter().map(|(id, b)| (*id, &b[..])).collect();
            let blob_bytes: usize = added.iter().map(|(_, b)| 8 + b.len()).sum();
            let mut out =
                Vec::with_capacity(self.payload.len() + 4 * self.dropped.len() + blob_bytes);
            put_blob_section(&mut out, &self.dropped, &added);
            out.extend_from_slice(&self.payload[NO_BLOBS.len()..]);
            out
        };
        let batch = ComputeBatch {
            addresses: self.addresses.into_addresses(),
            payload,
            count: self.count,
        };
        (batch, self.sent)
    }
}

/// Groups the compute-task commands of a batch by worker and encodes each group;
/// `sent` records the blobs each worker holds (workers gone are forgotten). A dispatch
/// superseded within the batch (the task moved or was released since) is skipped: its
/// run id no longer matches.
pub fn encode_compute(
    s: &Scheduler,
    cmds: &[Command],
    sent: &mut FxHashMap<WorkerId, SentBlobs>,
) -> BTreeMap<WorkerId, ComputeBatch> {
    if sent.len() > s.n_workers() {
        sent.retain(|&w, _| s.get_worker(w).is_some());
    }
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
                building
                    .entry(worker)
                    .or_insert_with(|| Building::new(sent.remove(&worker).unwrap_or_default()))
                    .push(s, task, run_id);
            }
        }
    }
    building
        .into_iter()
        .map(|(w, b)| {
            let (batch, held) = b.finish();
            sent.insert(w, held);
            (w, batch)
        })
        .collect()
}
