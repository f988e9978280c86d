//! `WorkerCore`: a worker process's task state (the `squall-worker` machine holding
//! Python values) and its compiled task loop. Python keeps the IO: it hands whole
//! messages in and flushes buffered reports; task threads call `run`, which takes ready
//! tasks, calls them and records their results without a Python frame of squall's own
//! per task.
//!
//! Locking: one mutex guards the machine. It is taken only while holding the GIL and
//! never held across a call into Python, so it is never contended while blocking the
//! GIL; threads wait for work on a condition variable with the GIL released.

use crate::convert::{key_from_py, key_to_py};
use crate::wire::{read_compute, write_keys, Reader};
use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use rustc_hash::FxHashMap;
use squall_core::Key;
use squall_worker::{DepIn, Job, KeyId, Machine, Outcome, Priority, TaskIn};
use std::cell::Cell;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// First byte of a call spec (`squall.spec.CALL_TAG`).
const CALL_TAG: u8 = 1;
/// Functions kept unpickled per process; beyond this the cache starts over.
const MAX_FUNCTIONS: usize = 256;
/// `run` returns to Python at least this often, so that the event loop thread gets the
/// GIL even when tasks are C functions that never offer it.
const SLICE: Duration = Duration::from_millis(5);

/// `run` results.
const EXIT: u8 = 0;
const WAKE: u8 = 1;
const AGAIN: u8 = 2;
const WAKE_LATER: u8 = 3;

thread_local! {
    /// The call this thread is running, as (task id, instance), for `secede` and
    /// `rejoin`.
    static CURRENT: Cell<Option<(u32, u64)>> = const { Cell::new(None) };
}

struct Inner {
    m: Machine<Py<PyAny>>,
    closing: bool,
    threads: usize,
    wake_pending: bool,
    /// When the oldest result not yet taken by the event loop was recorded.
    reports_since: Option<Instant>,
    /// Failed tasks to report: (task, run id, packed error).
    erred: Vec<(u32, u64, Py<PyAny>)>,
    functions: FxHashMap<Box<[u8]>, Py<PyAny>>,
}

/// Python helpers the loop calls: `(run_spec, fill_call, load_function, pack_error,
/// sizeof)`, as in `squall.worker`.
struct Hooks {
    run_spec: Py<PyAny>,
    fill_call: Py<PyAny>,
    load_function: Py<PyAny>,
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
}

impl WorkerCore {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the machine as it was at the panic;
        // keep serving rather than poison every later call.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unlocks, then drops the values the machine let go of: freeing a Python value
    /// may run arbitrary code (`__del__`), which must not run under the lock.
    fn unlock(mut g: MutexGuard<'_, Inner>) {
        let dead = std::mem::take(&mut g.m.graveyard);
        drop(g);
        drop(dead);
    }

    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    fn wake_threads(&self, g: &Inner) {
        if g.m.runnable() || g.closing {
            self.work.notify_all();
        }
    }

    /// Blocks (GIL released) until a task or rejoin may be runnable, or closing.
    fn wait_for_work(&self, py: Python<'_>) {
        py.detach(|| {
            let mut g = self.lock();
            while !g.closing && !g.m.runnable() && !self.surplus(&g) {
                g = self.work.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        });
    }

    /// More threads than slots plus seceded tasks: the extra one may leave.
    fn surplus(&self, g: &Inner) -> bool {
        g.threads > self.nthreads + g.m.n_seceded()
    }

    /// The function of a call spec, unpickled once per process.
    fn function(&self, py: Python<'_>, blob: &[u8]) -> PyResult<Py<PyAny>> {
        if let Some(f) = self.lock().functions.get(blob) {
            return Ok(f.clone_ref(py));
        }
        let f = self
            .hooks
            .load_function
            .call1(py, (PyBytes::new(py, blob),))?;
        let mut g = self.lock();
        let old = (g.functions.len() >= MAX_FUNCTIONS).then(|| std::mem::take(&mut g.functions));
        // Another thread may have loaded it meanwhile: that copy goes too.
        let replaced = g.functions.insert(blob.into(), f.clone_ref(py));
        drop(g);
        drop((old, replaced));
        Ok(f)
    }

    /// Calls a job; Ok((value, nbytes)) or the packed error.
    fn call(
        &self,
        py: Python<'_>,
        job: &Job,
        deps: &[(Key, Py<PyAny>)],
    ) -> Result<(Py<PyAny>, i64), Py<PyAny>> {
        // A Rust panic inside the task (a PyO3-based library's, re-raised by PyO3 when
        // the task's exception is fetched) is the task's failure, not the worker's.
        let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let value = self.call_spec(py, &job.spec, deps)?;
            let n = self.hooks.sizeof.call1(py, (value.bind(py),))?;
            Ok((value, n.extract::<i64>(py)?))
        }));
        let failed: PyErr = match called {
            Ok(Ok(done)) => return Ok(done),
            Ok(Err(e)) => e,
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                PyRuntimeError::new_err(format!("the task panicked in Rust code: {msg}"))
            }
        };
        Err(self.pack_error(py, failed))
    }

    /// `(exception text, traceback text, pickled exception, pickled traceback)` for an
    /// error; if packing it fails too, a plain RuntimeError saying so is packed.
    fn pack_error(&self, py: Python<'_>, e: PyErr) -> Py<PyAny> {
        let name = e
            .get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        self.hooks
            .pack_error
            .call1(py, (e.into_value(py),))
            .or_else(|_| {
                let plain = PyRuntimeError::new_err(format!(
                    "the task raised {name}, which could not be reported"
                ));
                self.hooks.pack_error.call1(py, (plain.into_value(py),))
            })
            .unwrap_or_else(|e| {
                let text = format!("the task failed and its error could not be reported: {e}");
                (text, "", PyBytes::new(py, b""), PyBytes::new(py, b""))
                    .into_pyobject(py)
                    .map(|t| t.into_any().unbind())
                    .unwrap_or_else(|_| py.None())
            })
    }

    fn call_spec(
        &self,
        py: Python<'_>,
        spec: &[u8],
        deps: &[(Key, Py<PyAny>)],
    ) -> PyResult<Py<PyAny>> {
        let data = || -> PyResult<Bound<'_, PyDict>> {
            let d = PyDict::new(py);
            for (k, v) in deps {
                d.set_item(key_to_py(py, k)?, v.bind(py))?;
            }
            Ok(d)
        };
        if spec.first() != Some(&CALL_TAG) {
            return self
                .hooks
                .run_spec
                .call1(py, (PyBytes::new(py, spec), data()?));
        }
        let n = spec
            .get(1..5)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
            .filter(|n| 5 + n <= spec.len())
            .ok_or_else(|| PyValueError::new_err("malformed call spec"))?;
        let func = self.function(py, &spec[5..5 + n])?;
        let call = self
            .hooks
            .loads
            .call1(py, (PyBytes::new(py, &spec[5 + n..]),))?;
        let mut call = call.bind(py).clone();
        if !deps.is_empty() {
            let (args, kwargs) = call.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
            call = self
                .hooks
                .fill_call
                .bind(py)
                .call1((args, kwargs, data()?))?;
        }
        let (args, kwargs) = call.extract::<(Bound<'_, PyTuple>, Bound<'_, PyDict>)>()?;
        let kwargs = if kwargs.is_empty() {
            None
        } else {
            Some(&kwargs)
        };
        Ok(func.bind(py).call(args, kwargs)?.unbind())
    }
}

fn decode_compute(payload: &[u8], addresses: &[String]) -> PyResult<Vec<TaskIn>> {
    let tasks = read_compute(payload, addresses)?
        .into_iter()
        .map(|t| TaskIn {
            id: t.task,
            run_id: t.run_id,
            key: t.key.as_bytes().to_vec(),
            priority: Priority {
                neg_user: t.neg_user,
                generation: t.generation,
                order: t.order,
            },
            spec: t.spec.to_vec(),
            resources: t.resources,
            deps: t
                .deps
                .into_iter()
                .map(|(key, _, holders)| DepIn {
                    key: key.as_bytes().to_vec(),
                    holders,
                })
                .collect(),
        });
    Ok(tasks.collect())
}

/// The instance of the call of `task` the calling thread runs (None if it runs none).
fn current_call(task: u32) -> Option<u64> {
    CURRENT
        .with(Cell::get)
        .and_then(|(id, instance)| (id == task).then_some(instance))
}

fn task_ids(payload: &[u8]) -> impl Iterator<Item = u32> + '_ {
    payload
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
}

fn key_of<V>(m: &Machine<V>, k: KeyId) -> Key {
    Key::from_encoded(&m.keys.get(k).bytes).expect("interned keys are valid")
}

#[pymethods]
impl WorkerCore {
    #[new]
    #[pyo3(signature = (address, nthreads, resources, report_delay, run_spec, fill_call, load_function, pack_error, sizeof))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        address: &str,
        nthreads: usize,
        resources: Vec<(String, f64)>,
        report_delay: f64,
        run_spec: Py<PyAny>,
        fill_call: Py<PyAny>,
        load_function: Py<PyAny>,
        pack_error: Py<PyAny>,
        sizeof: Py<PyAny>,
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
                wake_pending: false,
                reports_since: None,
                erred: Vec::new(),
                functions: FxHashMap::default(),
            }),
            work: Condvar::new(),
            nthreads,
            report_delay: Duration::from_secs_f64(report_delay.max(0.0)),
            epoch: Instant::now(),
            hooks: Hooks {
                run_spec,
                fill_call,
                load_function,
                pack_error,
                sizeof,
                loads,
            },
        })
    }

    fn set_address(&self, address: &str) {
        self.lock().m.set_address(address);
    }

    /// Takes a `compute` payload; returns how many tasks it held.
    fn compute(&self, payload: &[u8], addresses: Vec<String>) -> PyResult<usize> {
        let tasks = decode_compute(payload, &addresses)?;
        let n = tasks.len();
        let mut g = self.lock();
        for t in tasks {
            g.m.compute(t);
        }
        self.wake_threads(&g);
        Self::unlock(g);
        Ok(n)
    }

    /// `free-keys`: packed u32 task ids.
    fn free(&self, payload: &[u8]) {
        let mut g = self.lock();
        for id in task_ids(payload) {
            g.m.free(id);
        }
        Self::unlock(g);
    }

    /// `remove-replicas`: packed u32 task ids.
    fn remove_replicas(&self, payload: &[u8]) {
        let mut g = self.lock();
        for id in task_ids(payload) {
            g.m.remove_replica(id);
        }
        Self::unlock(g);
    }

    /// `steal-request`: the task's state when asked (None if unknown); queued tasks go.
    fn steal(&self, task: u32) -> Option<&'static str> {
        let mut g = self.lock();
        let state = g.m.steal(task).map(|s| s.name());
        Self::unlock(g);
        state
    }

    /// A task thread's body: run ready tasks until told otherwise. Returns 0 (leave:
    /// closing, or a surplus thread), 1 (results are waiting: have the event loop send
    /// them now, then call again), 2 (a time slice ended: call again) or 3 (have the
    /// loop send the results `report_delay` from now, then call again).
    fn run(&self, py: Python<'_>) -> PyResult<u8> {
        let entered = Instant::now();
        loop {
            let mut g = self.lock();
            if g.closing {
                g.threads -= 1;
                return Ok(EXIT);
            }
            // Results wait up to `report_delay` for more to share their message.
            let due = g
                .reports_since
                .is_some_and(|t| t.elapsed() >= self.report_delay);
            if due && !g.wake_pending {
                g.wake_pending = true;
                return Ok(WAKE);
            }
            if entered.elapsed() >= SLICE {
                return Ok(AGAIN);
            }
            if g.reports_since.is_some() && !g.wake_pending && g.m.runnable() {
                // The next task may run long: have the loop send these reports
                // `report_delay` from now whether or not it has finished.
                g.wake_pending = true;
                return Ok(WAKE_LATER);
            }
            let Some(job) = g.m.take_ready(self.now()) else {
                if g.reports_since.is_some() && !g.wake_pending {
                    g.wake_pending = true; // nothing else to run here: report now
                    return Ok(WAKE);
                }
                if self.surplus(&g) {
                    g.threads -= 1;
                    return Ok(EXIT);
                }
                drop(g);
                self.wait_for_work(py);
                continue;
            };
            let mut deps = Vec::with_capacity(job.deps.len());
            let mut lost = None;
            for &d in &job.deps {
                let key = key_of(&g.m, d);
                match &g.m.keys.get(d).value {
                    Some(v) => deps.push((key, v.clone_ref(py))),
                    None => lost = Some(key),
                }
            }
            drop(g);
            let start = Instant::now();
            let result = match lost {
                Some(key) => Err(self.lost_dependency(py, &key, &job)?),
                None => {
                    CURRENT.with(|c| c.set(Some((job.id, job.instance))));
                    let r = self.call(py, &job, &deps);
                    CURRENT.with(|c| c.set(None));
                    r
                }
            };
            let seconds = start.elapsed().as_secs_f64();
            drop(deps);
            let mut g = self.lock();
            let id = job.id;
            let mut unreported = None; // dropped after unlocking, like every value
            let reported = match result {
                Ok(value) => g.m.complete(job, Some(value), seconds) == Outcome::Finished,
                Err(packed) => match g.m.complete(job, None, seconds) {
                    Outcome::Erred { run_id } => {
                        g.erred.push((id, run_id, packed));
                        true
                    }
                    _ => {
                        unreported = Some(packed);
                        false
                    }
                },
            };
            if reported && g.reports_since.is_none() {
                g.reports_since = Some(Instant::now());
            }
            self.wake_threads(&g);
            Self::unlock(g);
            drop(unreported);
        }
    }

    /// A new task thread is about to call `run`.
    fn add_thread(&self) {
        self.lock().threads += 1;
    }

    /// Stop: waiting threads leave, running ones leave after their task.
    fn close(&self) {
        let mut g = self.lock();
        g.closing = true;
        self.work.notify_all();
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
        let mut g = self.lock();
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

    /// Running tasks and seconds since they started (heartbeats).
    fn executing(&self) -> Vec<(u32, f64)> {
        let now = self.now();
        let g = self.lock();
        g.m.executing()
            .map(|(id, start)| (id, now - start))
            .collect()
    }

    /// The task the calling thread runs, if any.
    #[staticmethod]
    fn current_task() -> Option<u32> {
        CURRENT.with(Cell::get).map(|(id, _)| id)
    }

    /// Seconds since `task` started.
    fn elapsed(&self, task: u32) -> Option<f64> {
        let now = self.now();
        self.lock().m.started(task).map(|s| now - s)
    }

    /// `secede()` from the thread running `task`: `None` if nothing changed, else
    /// `(run_id to report as long-running or None, whether another thread is needed)`.
    fn secede(&self, task: u32) -> Option<(Option<u64>, bool)> {
        let instance = current_call(task)?;
        let mut g = self.lock();
        let report = g.m.secede(task, instance)?;
        let need_thread = g.threads < self.nthreads + g.m.n_seceded();
        self.wake_threads(&g);
        Some((report, need_thread))
    }

    /// `rejoin()` from the thread running `task`: blocks (GIL released) until the call
    /// has a slot again or the worker closes.
    fn rejoin(&self, py: Python<'_>, task: u32) {
        let Some(instance) = current_call(task) else {
            return;
        };
        if self.lock().m.rejoin(instance) {
            return;
        }
        py.detach(|| {
            let mut g = self.lock();
            while !g.closing && !g.m.poll_rejoin(instance) {
                g = self.work.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        });
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
        let mut g = self.lock();
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
    fn fetched(&self, holder: &str, key_id: u32, value: Py<PyAny>, nbytes: i64) {
        let mut g = self.lock();
        g.m.fetched(holder, KeyId(key_id), Ok(Some((value, nbytes))));
        self.wake_threads(&g);
        Self::unlock(g);
    }

    /// `holder` does not have the key (or could not be reached).
    fn not_fetched(&self, holder: &str, key_id: u32) {
        let mut g = self.lock();
        g.m.fetched(holder, KeyId(key_id), Ok(None));
        Self::unlock(g);
    }

    /// The key's bytes would not load: its waiters erred, `[(task, run_id)]`.
    fn fetch_failed(&self, holder: &str, key_id: u32) -> Vec<(u32, u64)> {
        let mut g = self.lock();
        let erred = g.m.fetched(holder, KeyId(key_id), Err(()));
        Self::unlock(g);
        erred
    }

    /// Tasks still waiting on a missing key go back: the ids to `reschedule`.
    fn give_back(&self, waiters: Vec<(u32, u64)>) -> Vec<u32> {
        let mut g = self.lock();
        let back = g.m.give_back(&waiters);
        Self::unlock(g);
        back
    }

    /// Values for `get-data` (keys in `encode_keys` form); `missing` where not held.
    fn get_data(
        &self,
        py: Python<'_>,
        keys: &[u8],
        missing: Py<PyAny>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let mut r = Reader::new(keys);
        let g = self.lock();
        let mut out = Vec::new();
        while !r.done() {
            let key = r.key()?;
            out.push(match g.m.value(key.as_bytes()) {
                Some(v) => v.clone_ref(py),
                None => missing.clone_ref(py),
            });
        }
        Ok(out)
    }

    /// Scattered data registered by the scheduler as task `task`.
    fn put_scattered(
        &self,
        task: u32,
        key: &Bound<'_, PyAny>,
        value: Py<PyAny>,
        nbytes: i64,
    ) -> PyResult<()> {
        let key = key_from_py(key)?;
        let mut g = self.lock();
        g.m.put_scattered(task, key.as_bytes(), value, nbytes);
        self.wake_threads(&g);
        Self::unlock(g);
        Ok(())
    }

    /// The values held: `{key: value}` (a snapshot).
    fn data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let held: Vec<(Key, Py<PyAny>)> = {
            let g = self.lock();
            let values = g.m.keys.iter();
            values
                .filter_map(|(k, slot)| Some((key_of(&g.m, k), slot.value.as_ref()?.clone_ref(py))))
                .collect()
        };
        let d = PyDict::new(py);
        for (k, v) in held {
            d.set_item(key_to_py(py, &k)?, v)?;
        }
        Ok(d)
    }

    /// Sizes of the values held: `{key: nbytes}` (a snapshot).
    fn nbytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let held: Vec<(Key, i64)> = {
            let g = self.lock();
            let values = g.m.keys.iter().filter(|(_, slot)| slot.value.is_some());
            values
                .map(|(k, slot)| (key_of(&g.m, k), slot.nbytes))
                .collect()
        };
        let d = PyDict::new(py);
        for (k, n) in held {
            d.set_item(key_to_py(py, &k)?, n)?;
        }
        Ok(d)
    }

    /// The tasks known: `{task: (key, state)}` (a snapshot).
    fn tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let known: Vec<(u32, Key, &'static str)> = {
            let g = self.lock();
            let tasks = g.m.tasks();
            tasks
                .map(|t| (t.id, key_of(&g.m, t.key), t.state.name()))
                .collect()
        };
        let d = PyDict::new(py);
        for (id, k, state) in known {
            d.set_item(id, (key_to_py(py, &k)?, state))?;
        }
        Ok(d)
    }
}

impl WorkerCore {
    /// The error of a job whose dependency's value went away before it ran.
    fn lost_dependency(&self, py: Python<'_>, dep: &Key, job: &Job) -> PyResult<Py<PyAny>> {
        let key = key_of(&self.lock().m, job.key);
        let msg = format!(
            "dependency {} of {} is no longer held",
            key_to_py(py, dep)?.repr()?,
            key_to_py(py, &key)?.repr()?
        );
        Ok(self.pack_error(py, PyKeyError::new_err(msg)))
    }
}
