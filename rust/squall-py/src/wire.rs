//! Hot messages of the wire protocol, encoded and decoded in Rust (docs/runtime.md).
//!
//! A `compute` payload holds, per task (little-endian):
//!
//! ```text
//! u32 task | u64 run_id | i32 −user priority | f64 generation | u32 order | u8 flags
//! | bytes key | bytes run spec | u16 n_resources × (str name, f64 amount)
//! | u32 n_deps × (bytes key, i64 nbytes, u16 n_holders × u16 address index)
//! ```
//!
//! where `bytes` = u32 length + bytes (keys in squall-core's canonical key encoding) and
//! holder addresses index the message's address table (sent in the frame header).

use crate::convert::key_to_py;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use squall_core::{Command, DepRef, Key, NewTask, RunSpec, Scheduler, TaskId, WorkerId};
use std::collections::BTreeMap;
use std::sync::Arc;

const FLAG_ACTOR: u8 = 1;

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// One worker's share of a drained command batch.
#[derive(Default)]
pub struct ComputeBatch {
    pub addresses: Vec<String>,
    address_index: BTreeMap<String, u16>,
    pub payload: Vec<u8>,
    pub count: usize,
}

impl ComputeBatch {
    fn address(&mut self, a: &str) -> u16 {
        if let Some(&i) = self.address_index.get(a) {
            return i;
        }
        let i = self.addresses.len() as u16;
        self.addresses.push(a.to_owned());
        self.address_index.insert(a.to_owned(), i);
        i
    }

    fn push(&mut self, s: &Scheduler, t: TaskId, run_id: u64) {
        let ts = s.task(t);
        let out = &mut self.payload;
        out.extend_from_slice(&t.0.to_le_bytes());
        out.extend_from_slice(&run_id.to_le_bytes());
        out.extend_from_slice(&ts.priority.neg_user.to_le_bytes());
        out.extend_from_slice(&ts.priority.generation.to_le_bytes());
        out.extend_from_slice(&ts.priority.order.to_le_bytes());
        out.push(if ts.is_actor() { FLAG_ACTOR } else { 0 });
        put_bytes(out, ts.key.as_bytes());
        put_bytes(out, ts.run_spec.as_deref().unwrap_or(&[]));
        let resources = ts
            .restrictions()
            .map(|r| r.resources.as_slice())
            .unwrap_or(&[]);
        out.extend_from_slice(&(resources.len() as u16).to_le_bytes());
        for (name, amount) in resources {
            put_bytes(out, name.as_bytes());
            out.extend_from_slice(&amount.to_le_bytes());
        }
        let deps: Vec<TaskId> = ts.dependencies.iter().collect();
        // u32: a reduction over a large map (`submit(sum, futures)`) has >65k inputs.
        self.payload
            .extend_from_slice(&(deps.len() as u32).to_le_bytes());
        for d in deps {
            let dts = s.task(d);
            put_bytes(&mut self.payload, dts.key.as_bytes());
            self.payload.extend_from_slice(&dts.nbytes.to_le_bytes());
            let holders: Vec<u16> = dts
                .who_has
                .iter()
                .map(|w| self.address(&s.worker(w).address))
                .collect();
            self.payload
                .extend_from_slice(&(holders.len() as u16).to_le_bytes());
            for h in holders {
                self.payload.extend_from_slice(&h.to_le_bytes());
            }
        }
        self.count += 1;
    }
}

/// Groups the compute-task commands of a batch by worker and encodes each group.
/// A dispatch superseded within the batch (the task moved or was released since) is
/// skipped: its run id no longer matches.
pub fn encode_compute(s: &Scheduler, cmds: &[Command]) -> BTreeMap<WorkerId, ComputeBatch> {
    let mut out: BTreeMap<WorkerId, ComputeBatch> = BTreeMap::new();
    for c in cmds {
        if let Command::ComputeTask {
            worker,
            task,
            run_id,
        } = *c
        {
            let current = s
                .get_task(task)
                .is_some_and(|ts| ts.run_id == run_id && ts.processing_on == Some(worker));
            if current {
                out.entry(worker).or_default().push(s, task, run_id);
            }
        }
    }
    out
}

/// The per-task notices of a drained batch, grouped per recipient and op:
/// `free-keys` / `remove-replicas` to workers as packed u32 task ids, and
/// `key-in-memory` / `lost-data` / `task-retried` / `cancelled-keys` to clients as keys
/// in `encode_keys` form. Other commands are left to `Commands.records()`.
#[derive(Default)]
pub struct Notices {
    pub to_workers: BTreeMap<(u32, &'static str), Vec<u8>>,
    pub to_clients: BTreeMap<(u32, &'static str), Vec<u8>>,
}

pub fn encode_notices(s: &Scheduler, cmds: &[Command]) -> Notices {
    let mut n = Notices::default();
    for c in cmds {
        match *c {
            Command::FreeKeys { worker, task } => n
                .to_workers
                .entry((worker.0, "free-keys"))
                .or_default()
                .extend_from_slice(&task.0.to_le_bytes()),
            Command::RemoveReplicas { worker, task } => n
                .to_workers
                .entry((worker.0, "remove-replicas"))
                .or_default()
                .extend_from_slice(&task.0.to_le_bytes()),
            Command::KeyInMemory { client, task }
            | Command::LostData { client, task }
            | Command::TaskRetried { client, task }
            | Command::CancelledKeys { client, task, .. } => {
                let op = match c {
                    Command::KeyInMemory { .. } => "key-in-memory",
                    Command::LostData { .. } => "lost-data",
                    Command::TaskRetried { .. } => "task-retried",
                    _ => "cancelled-keys",
                };
                if let Some(ts) = s.task_slot(task) {
                    put_bytes(
                        n.to_clients.entry((client.0, op)).or_default(),
                        ts.key.as_bytes(),
                    );
                }
            }
            _ => {}
        }
    }
    n
}

/// Decodes an `update-graph` payload into new tasks:
/// `keys | i64 spec sizes[n] | u32 dep offsets[n + 1] | u32 dep indices | specs`, where
/// `keys` (`keys_bytes` long, `encode_keys` form) holds the n task keys then the
/// external keys they depend on; a dependency index `>= n` names external key
/// `index - n`; a spec size of -1 marks data (no spec).
pub fn decode_graph(payload: &[u8], n: usize, keys_bytes: usize) -> PyResult<Vec<NewTask>> {
    let bad = |what: &str| PyValueError::new_err(format!("malformed update-graph: {what}"));
    let mut r = Reader {
        b: payload
            .get(..keys_bytes)
            .ok_or_else(|| bad("keys truncated"))?,
        pos: 0,
    };
    let mut keys = Vec::with_capacity(n);
    while r.pos < keys_bytes {
        keys.push(r.key()?);
    }
    if keys.len() < n {
        return Err(bad("fewer keys than tasks"));
    }
    let external = keys.split_off(n);
    let mut r = Reader {
        b: payload,
        pos: keys_bytes,
    };
    let mut sizes = Vec::with_capacity(n);
    for _ in 0..n {
        sizes.push(i64::from_le_bytes(r.arr()?));
    }
    let mut offsets = Vec::with_capacity(n + 1);
    for _ in 0..=n {
        offsets.push(r.u32()? as usize);
    }
    let n_deps = *offsets.last().unwrap_or(&0);
    if offsets.windows(2).any(|w| w[0] > w[1]) || offsets[0] != 0 {
        return Err(bad("dependency offsets not increasing from 0"));
    }
    let mut deps = Vec::with_capacity(n_deps);
    for _ in 0..n_deps {
        let j = r.u32()? as usize;
        deps.push(if j < n {
            DepRef::Local(j as u32)
        } else {
            DepRef::Key(
                external
                    .get(j - n)
                    .ok_or_else(|| bad("dependency index"))?
                    .clone(),
            )
        });
    }
    let mut tasks = Vec::with_capacity(n);
    for (i, key) in keys.into_iter().enumerate() {
        let spec: Option<RunSpec> = match sizes[i] {
            -1 => None,
            len if len >= 0 => Some(Arc::from(r.take(len as usize)?)),
            _ => return Err(bad("negative spec size")),
        };
        let ds = deps[offsets[i]..offsets[i + 1]].to_vec();
        tasks.push(NewTask::new(key, ds, spec));
    }
    if r.pos != payload.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(tasks)
}

pub(crate) struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Self { b, pos: 0 }
    }
    pub(crate) fn done(&self) -> bool {
        self.pos >= self.b.len()
    }
    fn take(&mut self, n: usize) -> PyResult<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| PyValueError::new_err("truncated message"))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub(crate) fn arr<const N: usize>(&mut self) -> PyResult<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("exact length"))
    }
    pub(crate) fn u16(&mut self) -> PyResult<u16> {
        Ok(u16::from_le_bytes(self.arr()?))
    }
    pub(crate) fn u32(&mut self) -> PyResult<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    pub(crate) fn bytes(&mut self) -> PyResult<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub(crate) fn key(&mut self) -> PyResult<Key> {
        let raw = self.bytes()?;
        Key::from_encoded(raw).ok_or_else(|| PyValueError::new_err("malformed key in message"))
    }
}

/// One task of a `compute` payload, as written by [`ComputeBatch::push`].
pub(crate) struct ComputeTask<'a> {
    pub task: u32,
    pub run_id: u64,
    pub neg_user: i32,
    pub generation: f64,
    pub order: u32,
    pub actor: bool,
    pub key: Key,
    pub spec: &'a [u8],
    pub resources: Vec<(String, f64)>,
    /// (key, nbytes, holder addresses)
    pub deps: Vec<(Key, i64, Vec<String>)>,
}

/// Reads a whole `compute` payload (holder indices resolved against `addresses`);
/// malformed input is a ValueError and yields nothing.
pub(crate) fn read_compute<'a>(
    payload: &'a [u8],
    addresses: &[String],
) -> PyResult<Vec<ComputeTask<'a>>> {
    let mut r = Reader::new(payload);
    let mut out = Vec::new();
    while !r.done() {
        let task = r.u32()?;
        let run_id = u64::from_le_bytes(r.arr()?);
        let neg_user = i32::from_le_bytes(r.arr()?);
        let generation = f64::from_le_bytes(r.arr()?);
        let order = r.u32()?;
        let actor = r.arr::<1>()?[0] & FLAG_ACTOR != 0;
        let key = r.key()?;
        let spec = r.bytes()?;
        let mut resources = Vec::new();
        for _ in 0..r.u16()? {
            let name = std::str::from_utf8(r.bytes()?)
                .map_err(|_| PyValueError::new_err("resource name is not utf-8"))?;
            resources.push((name.to_owned(), f64::from_le_bytes(r.arr()?)));
        }
        let mut deps = Vec::new();
        for _ in 0..r.u32()? {
            let dkey = r.key()?;
            let nbytes = i64::from_le_bytes(r.arr()?);
            let mut holders = Vec::new();
            for _ in 0..r.u16()? {
                let a = addresses
                    .get(r.u16()? as usize)
                    .ok_or_else(|| PyValueError::new_err("holder index out of range"))?;
                holders.push(a.clone());
            }
            deps.push((dkey, nbytes, holders));
        }
        out.push(ComputeTask {
            task,
            run_id,
            neg_user,
            generation,
            order,
            actor,
            key,
            spec,
            resources,
            deps,
        });
    }
    Ok(out)
}

/// Decodes a `compute` payload for inspection (tests, tools): a list of
/// `(task, run_id, key, priority, run_spec, actor, resources, deps)` where priority is
/// `(−user, generation, order)` and deps is `[(key, nbytes, [holder address, …]), …]`.
/// Workers read payloads straight into their compiled state instead.
#[pyfunction]
pub fn decode_compute<'py>(
    py: Python<'py>,
    payload: &[u8],
    addresses: Vec<String>,
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    let mut out = Vec::new();
    for t in read_compute(payload, &addresses)? {
        let mut deps = Vec::with_capacity(t.deps.len());
        for (dkey, nbytes, holders) in t.deps {
            deps.push((key_to_py(py, &dkey)?, nbytes, holders).into_pyobject(py)?);
        }
        let item = (
            t.task,
            t.run_id,
            key_to_py(py, &t.key)?,
            (t.neg_user, t.generation, t.order),
            PyBytes::new(py, t.spec),
            t.actor,
            t.resources,
            deps,
        );
        out.push(item.into_pyobject(py)?);
    }
    Ok(out)
}

/// Encodes Python keys for the wire: each as `u32 length | canonical key bytes`.
#[pyfunction]
pub fn encode_keys<'py>(
    py: Python<'py>,
    keys: Vec<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut out = Vec::new();
    for k in &keys {
        put_bytes(&mut out, crate::convert::key_from_py(k)?.as_bytes());
    }
    Ok(PyBytes::new(py, &out))
}

/// Keys written by `encode_keys`, without making Python objects.
pub fn read_keys(payload: &[u8]) -> PyResult<Vec<Key>> {
    let mut r = Reader::new(payload);
    let mut out = Vec::new();
    while !r.done() {
        out.push(r.key()?);
    }
    Ok(out)
}

/// Canonical key bytes in `encode_keys` form.
pub fn write_keys<'a>(keys: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for k in keys {
        put_bytes(&mut out, k);
    }
    out
}

/// Decodes keys written by `encode_keys`; malformed input is a ValueError.
#[pyfunction]
pub fn decode_keys<'py>(py: Python<'py>, payload: &[u8]) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut r = Reader { b: payload, pos: 0 };
    let mut out = Vec::new();
    while r.pos < payload.len() {
        out.push(key_to_py(py, &r.key()?)?);
    }
    Ok(out)
}
