//! `WorkerCore`: a worker process's task state (the `squall-worker` machine holding
//! Python values) and its compiled task loop. Python keeps the IO: it hands whole
//! messages in and flushes buffered reports; task threads call `run`, which takes ready
//! tasks, calls them and records their results without a Python frame of squall's own
//! per task.
//!
//! Locking: one mutex guards the machine. It is taken only while holding the GIL and
//! never held across a call into Python, so it is never contended while blocking the
//! GIL; threads wait for work on a condition variable with the GIL released.

mod blobs;
mod call;
mod counts;
mod executing_record;
mod memory;
mod task_stream;
mod threads;

pub use executing_record::read_executing_record;
use executing_record::ExecutingRecord;
pub use threads::RunAnswer;

use crate::convert::{key_from_py, key_to_py, packed};
use crate::errors::wire_error;
use blobs::{BlobCache, Spec};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyDict};
use squall_core::Key;
use squall_wire::compute::decode_compute_of;
use squall_wire::keys::{read_keys, write_keys};
use squall_worker::{KeyId, Machine, Sampler, Slot};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

struct Inner {
    m: Machine<Py<PyAny>, Spec>,
    closing: bool,
    threads: usize,
    /// Threads waiting on `work` now: with none, nobody is woken (a notification is
    /// a system call, and the task thread would make one per task).
    sleeping: usize,
    wake_pending: bool,
    /// When the oldest result not yet taken by the event loop was recorded.
    reports_since: Option<Instant>,
    /// Failed tasks to report: (task, run id, packed error).
    erred: Vec<(u32, u64, Py<PyAny>)>,
    /// The calls running now, for the nanny (None without one).
    record: Option<ExecutingRecord>,
    /// The tasks run since the last heartbeat, sampled (docs/runtime.md#task-stream).
    stream: Sampler<task_stream::TaskSample>,
}

/// Python helpers the loop calls: `(fill_call, pack_error, sizeof)`, as in
/// `squall.worker`.
struct Hooks {
    fill_call: Py<PyAny>,
    pack_error: Py<PyAny>,
    sizeof: Py<PyAny>,
    loads: Py<PyAny>,
}

#[pyclass(module = "squall._core", frozen)]
pub struct WorkerCore {
    inner: Mutex<Inner>,
    work: Condvar,
    nthreads: usize,
    report_delay: Duration,
    epoch: Instant,
    hooks: Hooks,
    /// Numbers the task threads in the task stream (docs/runtime.md#task-stream).
    next_thread: AtomicU32,
    /// Each task thread's Python thread ident and the call it runs (task id + 1; 0:
    /// none), for call stacks and the profiler (docs/runtime.md#call-stacks-and-profiles).
    /// A thread writes only its own slot, so a call costs two relaxed stores.
    calls: Mutex<Vec<(u64, Arc<AtomicU64>)>>,
    /// The blobs the scheduler sent, touched by the event loop only (`compute`).
    blobs: Mutex<BlobCache>,
}

impl WorkerCore {
    /// `{key: f(slot)}` for the keys where `f` gives something, read under the lock;
    /// the dict is made after unlocking (making Python objects may run `__del__`).
    fn held<'py, T: IntoPyObject<'py>>(
        &self,
        py: Python<'py>,
        f: impl Fn(&Slot<Py<PyAny>>) -> Option<T>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let held: Vec<(Key, T)> = {
            let g = self.lock(py);
            let slots = g.m.keys.iter();
            slots
                .filter_map(|(k, slot)| Some((key_of(&g.m, k), f(slot)?)))
                .collect()
        };
        let d = PyDict::new(py);
        for (k, v) in held {
            d.set_item(key_to_py(py, &k)?, v)?;
        }
        Ok(d)
    }

    /// Applies `f` to each task id of a packed u32 payload (`what` names it in errors).
    fn each_task(
        &self,
        py: Python<'_>,
        payload: &[u8],
        what: &'static str,
        f: impl Fn(&mut Machine<Py<PyAny>, Spec>, u32),
    ) -> PyResult<()> {
        let ids = packed::<u32>(payload, what)?;
        let mut g = self.lock(py);
        ids.into_iter().for_each(|id| f(&mut g.m, id));
        Self::unlock(g);
        Ok(())
    }

    /// Locks the machine from a thread attached to Python. A contended wait detaches
    /// first: a task thread may hold the lock while it needs the GIL (to read a
    /// result's type for the task stream, say), and waiting for the lock with the GIL
    /// held would deadlock the two threads.
    fn lock(&self, py: Python<'_>) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the machine as it was at the panic;
        // keep serving rather than poison every later call.
        self.inner
            .lock_py_attached(py)
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the machine from a thread detached from Python (inside `py.detach`).
    fn lock_detached(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unlocks, then drops the values the machine let go of: freeing a Python value
    /// may run arbitrary code (`__del__`), which must not run under the lock.
    fn unlock(mut g: MutexGuard<'_, Inner>) {
        let dead = std::mem::take(&mut g.m.graveyard);
        drop(g);
        drop(dead);
    }

    fn blob_cache(&self) -> MutexGuard<'_, BlobCache> {
        self.blobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    fn wake_threads(&self, g: &Inner) {
        if g.sleeping > 0 && (g.m.runnable() || g.closing) {
            self.work.notify_all();
        }
    }

    /// Waits (lock released) to be woken by `wake_threads` or `close`.
    fn sleep<'a>(&self, mut g: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        g.sleeping += 1;
        let mut g = self.work.wait(g).unwrap_or_else(|e| e.into_inner());
        g.sleeping -= 1;
        g
    }

    /// Blocks (GIL released) until a task or rejoin may be runnable, or closing.
    fn wait_for_work(&self, py: Python<'_>) {
        py.detach(|| {
            let mut g = self.lock_detached();
            while !g.closing && !g.m.runnable() && !self.surplus(&g) {
                g = self.sleep(g);
            }
        });
    }

    /// More threads than slots plus seceded tasks: the extra one may leave.
    fn surplus(&self, g: &Inner) -> bool {
        g.threads > self.nthreads + g.m.n_seceded()
    }
}

fn key_of<V, S>(m: &Machine<V, S>, k: KeyId) -> Key {
    Key::from_encoded(&m.keys.get(k).bytes).expect("interned keys are valid")
}

#[pymethods]
impl WorkerCore {
    #[new]
    #[pyo3(signature = (address, nthreads, resources, report_delay, fill_call, pack_error, sizeof, task_stream_samples))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        address: &str,
        nthreads: usize,
        resources: Vec<(String, f64)>,
        report_delay: f64,
        fill_call: Py<PyAny>,
        pack_error: Py<PyAny>,
        sizeof: Py<PyAny>,
        task_stream_samples: usize,
    ) -> PyResult<Self> {
        if nthreads == 0 {
            return Err(PyValueError::new_err("nthreads must be at least 1"));
        }
        let loads = py.import("pickle")?.getattr("loads")?.unbind();
        Ok(Self {
            inner: Mutex::new(Inner {
                m: Machine::new(address, nthreads, resources),
                closing: false,
                threads: 0,
                sleeping: 0,
                wake_pending: false,
                reports_since: None,
                erred: Vec::new(),
                record: None,
                stream: Sampler::new(task_stream_samples),
            }),
            work: Condvar::new(),
            nthreads,
            report_delay: Duration::from_secs_f64(report_delay.max(0.0)),
            epoch: Instant::now(),
            hooks: Hooks {
                fill_call,
                pack_error,
                sizeof,
                loads,
            },
            next_thread: AtomicU32::new(0),
            calls: Mutex::new(Vec::new()),
            blobs: Mutex::new(BlobCache::default()),
        })
    }

    fn set_address(&self, py: Python<'_>, address: &str) {
        self.lock(py).m.set_address(address);
    }

    /// Keep the record of executing calls in the file at `path` (made by the nanny).
    fn record_executing(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        let record = ExecutingRecord::open(path)?;
        self.lock(py).record = Some(record);
        Ok(())
    }

    /// Takes a `compute` payload (of `n` tasks, as its header says: a hint only, any
    /// value taken); returns how many tasks it held. A malformed payload, or one naming
    /// a blob this worker does not hold, is refused whole.
    #[pyo3(signature = (payload, addresses, n=0))]
    fn compute(
        &self,
        py: Python<'_>,
        payload: &[u8],
        addresses: Vec<String>,
        n: i64,
    ) -> PyResult<usize> {
        let n = usize::try_from(n).unwrap_or(0);
        let batch = decode_compute_of(payload, &addresses, n).map_err(wire_error)?;
        let (tasks, gone) = {
            let mut cache = self.blob_cache();
            let resolved = cache.resolve(batch)?;
            cache.apply(resolved)
        };
        let n = tasks.len();
        let mut g = self.lock(py);
        g.m.reserve(n);
        for t in tasks {
            g.m.compute(t);
        }
        self.wake_threads(&g);
        Self::unlock(g);
        drop(gone);
        Ok(n)
    }

    /// Forgets the blobs sent so far: called on registering with a scheduler, which
    /// sends them anew (docs/protocol.md#compute).
    fn clear_blobs(&self) {
        let gone = self.blob_cache().clear();
        drop(gone); // not under the lock (a function may hold anything)
    }

    /// How many blobs the worker holds (tests, diagnostics).
    fn blobs_held(&self) -> usize {
        self.blob_cache().len()
    }

    /// `free-keys`: packed u32 task ids.
    fn free(&self, py: Python<'_>, payload: &[u8]) -> PyResult<()> {
        self.each_task(py, payload, "free-keys", Machine::free)
    }

    /// `remove-replicas`: packed u32 task ids.
    fn remove_replicas(&self, py: Python<'_>, payload: &[u8]) -> PyResult<()> {
        self.each_task(py, payload, "remove-replicas", Machine::remove_replica)
    }

    /// `steal-request`: the task's state when asked (None if unknown); queued tasks go.
    fn steal(&self, py: Python<'_>, task: u32) -> Option<&'static str> {
        let mut g = self.lock(py);
        let state = g.m.steal(task).map(|s| s.name());
        Self::unlock(g);
        state
    }

    /// The buffered reports: `finished` as `(n, payload)` or None; failed tasks as
    /// `[(task, run_id, packed error)]`; keys of fetched copies gained and dropped
    /// (`encode_keys` form, empty if none). The event loop's wake-up is taken too.
    #[allow(clippy::type_complexity)]
    fn take_reports<'py>(
        &self,
        py: Python<'py>,
    ) -> (
        Option<(usize, Bound<'py, PyBytes>)>,
        Vec<(u32, u64, Py<PyAny>)>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
    ) {
        let mut g = self.lock(py);
        g.wake_pending = false;
        g.reports_since = None;
        let finished = std::mem::take(&mut g.m.finished);
        let erred = std::mem::take(&mut g.erred);
        let added = std::mem::take(&mut g.m.replicas_added);
        let dropped = std::mem::take(&mut g.m.replicas_dropped);
        drop(g);
        let finished =
            (!finished.is_empty()).then(|| (finished.len(), PyBytes::new(py, &finished.encode())));
        let keys = |ks: Vec<Box<[u8]>>| PyBytes::new(py, &write_keys(ks.iter().map(|k| &k[..])));
        (finished, erred, keys(added), keys(dropped))
    }

    /// Fetches to start, `[(holder, [key], [key id])]`, and keys nobody can provide,
    /// `[(key, [(task, run_id)])]`. `connected` peers are preferred.
    #[allow(clippy::type_complexity)]
    fn take_fetches<'py>(
        &self,
        py: Python<'py>,
        connected: Vec<String>,
    ) -> PyResult<(
        Vec<(String, Vec<Bound<'py, PyAny>>, Vec<u32>)>,
        Vec<(Bound<'py, PyAny>, Vec<(u32, u64)>)>,
    )> {
        let mut g = self.lock(py);
        let (plan, missing) = g.m.take_fetches(&|h| connected.iter().any(|c| c == h));
        // Python objects are made after unlocking: allocating may run the cyclic GC,
        // and with it any `__del__`, which must not run under the lock.
        let plan: Vec<_> = plan
            .into_iter()
            .map(|(holder, ks)| {
                (
                    holder,
                    ks.iter().map(|&k| key_of(&g.m, k)).collect::<Vec<_>>(),
                    ks,
                )
            })
            .collect();
        let missing: Vec<_> = missing
            .into_iter()
            .map(|m| (key_of(&g.m, m.key), m.waiters))
            .collect();
        Self::unlock(g);
        let mut fetches = Vec::with_capacity(plan.len());
        for (holder, keys, ks) in plan {
            let keys = keys
                .iter()
                .map(|k: &Key| key_to_py(py, k))
                .collect::<PyResult<_>>()?;
            fetches.push((holder, keys, ks.iter().map(|k: &KeyId| k.0).collect()));
        }
        let mut gone = Vec::with_capacity(missing.len());
        for (key, waiters) in missing {
            gone.push((key_to_py(py, &key)?, waiters));
        }
        Ok((fetches, gone))
    }

    /// A fetched value arrived.
    fn fetched(&self, py: Python<'_>, holder: &str, key_id: u32, value: Py<PyAny>, nbytes: i64) {
        let mut g = self.lock(py);
        g.m.fetched(holder, KeyId(key_id), Ok(Some((value, nbytes))));
        self.wake_threads(&g);
        Self::unlock(g);
    }

    /// `holder` does not have the key (or could not be reached).
    fn not_fetched(&self, py: Python<'_>, holder: &str, key_id: u32) {
        let mut g = self.lock(py);
        g.m.fetched(holder, KeyId(key_id), Ok(None));
        Self::unlock(g);
    }

    /// The key's bytes would not load: its waiters erred, `[(task, run_id)]`.
    fn fetch_failed(&self, py: Python<'_>, holder: &str, key_id: u32) -> Vec<(u32, u64)> {
        let mut g = self.lock(py);
        let erred = g.m.fetched(holder, KeyId(key_id), Err(()));
        Self::unlock(g);
        erred
    }

    /// Tasks still waiting on a missing key go back: the ids to `reschedule`.
    fn give_back(&self, py: Python<'_>, waiters: Vec<(u32, u64)>) -> Vec<u32> {
        let mut g = self.lock(py);
        let back = g.m.give_back(&waiters);
        Self::unlock(g);
        back
    }

    /// Values for `get-data` (keys in `encode_keys` form); `missing` where not held,
    /// the spill handle where spilled.
    fn get_data(
        &self,
        py: Python<'_>,
        keys: &[u8],
        missing: Py<PyAny>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let keys = read_keys(keys).map_err(wire_error)?;
        let mut g = self.lock(py);
        let values = keys.iter().map(|k| match g.m.read(k.as_bytes()) {
            Some((v, _)) => v.clone_ref(py),
            None => missing.clone_ref(py),
        });
        Ok(values.collect())
    }

    /// Scattered data registered by the scheduler as task `task`.
    fn put_scattered(
        &self,
        py: Python<'_>,
        task: u32,
        key: &Bound<'_, PyAny>,
        value: Py<PyAny>,
        nbytes: i64,
    ) -> PyResult<()> {
        let key = key_from_py(key)?;
        let mut g = self.lock(py);
        g.m.put_scattered(task, key.as_bytes(), value, nbytes);
        self.wake_threads(&g);
        Self::unlock(g);
        Ok(())
    }

    /// Record task state changes for `take_transitions` (a worker plugin's
    /// `transition` hook), or stop.
    fn feed_transitions(&self, py: Python<'_>, on: bool) {
        let mut g = self.lock(py);
        g.m.feed_transitions(on);
        Self::unlock(g);
    }

    /// The task state changes since the last call: `[(key, start, finish)]`, in order
    /// (empty while the feed is off).
    fn take_transitions<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Vec<(Bound<'py, PyAny>, &'static str, &'static str)>> {
        let changes = {
            let mut g = self.lock(py);
            g.m.take_transitions()
        };
        changes
            .into_iter()
            .map(|t| {
                let key = Key::from_encoded(&t.key).expect("interned keys are valid");
                Ok((key_to_py(py, &key)?, t.start, t.finish))
            })
            .collect()
    }

    /// The values held: `{key: value}` (a snapshot).
    fn data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.held(py, |slot| slot.value.as_ref().map(|v| v.clone_ref(py)))
    }

    /// Sizes of the values held: `{key: nbytes}` (a snapshot).
    fn nbytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.held(py, |slot| slot.value.as_ref().map(|_| slot.nbytes))
    }

    /// The tasks known: `{task: (key, state)}` (a snapshot).
    /// The key of the task `task` names here, if it knows it (logs, errors).
    fn task_key(&self, py: Python<'_>, task: u32) -> PyResult<Option<Py<PyAny>>> {
        let key = {
            let g = self.lock(py);
            g.m.task(task).map(|t| key_of(&g.m, t.key))
        };
        key.map(|k| key_to_py(py, &k).map(Bound::unbind))
            .transpose()
    }

    fn tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let known: Vec<(u32, Key, &'static str)> = {
            let g = self.lock(py);
            let tasks = g.m.tasks();
            tasks
                .map(|(id, t)| (id, key_of(&g.m, t.key), t.state.name()))
                .collect()
        };
        let d = PyDict::new(py);
        for (id, k, state) in known {
            d.set_item(id, (key_to_py(py, &k)?, state))?;
        }
        Ok(d)
    }
}
