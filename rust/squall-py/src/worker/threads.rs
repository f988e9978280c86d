//! Task threads: the compiled run loop, its time slices and report wake-ups, and
//! `secede` / `rejoin`.

use super::{key_of, WorkerCore};
use pyo3::prelude::*;
use squall_worker::Outcome;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `run` returns to Python at least this often, so that the event loop thread gets the
/// GIL even when tasks are C functions that never offer it.
const SLICE: Duration = Duration::from_millis(5);

/// What `WorkerCore.run` asks of the task thread that called it.
#[pyclass(module = "squall._core", frozen, eq, eq_int)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum RunAnswer {
    /// Leave: closing, or a surplus thread.
    #[pyo3(name = "EXIT")]
    Exit,
    /// Results are waiting: have the event loop send them now, then call again.
    #[pyo3(name = "WAKE")]
    Wake,
    /// A time slice ended: call again.
    #[pyo3(name = "AGAIN")]
    Again,
    /// Have the loop send the results `report_delay` from now, then call again.
    #[pyo3(name = "WAKE_LATER")]
    WakeLater,
    /// Managed memory is over the spill target: spill, then call again.
    #[pyo3(name = "SPILL")]
    Spill,
}

thread_local! {
    /// The call this thread is running, as (task id, instance), for `secede` and
    /// `rejoin`.
    static CURRENT: Cell<Option<(u32, u64)>> = const { Cell::new(None) };
    /// This thread's slot in its worker's `calls`: (the `WorkerCore`'s address, slot).
    static SLOT: RefCell<Option<(usize, Arc<AtomicU64>)>> = const { RefCell::new(None) };
}

/// The instance of the call of `task` the calling thread runs (None if it runs none).
fn current_call(task: u32) -> Option<u64> {
    CURRENT
        .with(Cell::get)
        .and_then(|(id, instance)| (id == task).then_some(instance))
}

#[pymethods]
impl WorkerCore {
    /// A task thread's body: run ready tasks until told otherwise ([`RunAnswer`]).
    fn run(&self, py: Python<'_>) -> PyResult<RunAnswer> {
        let entered = Instant::now();
        let slot = self.call_slot();
        // The clock as last read: when the previous task ended (one reading per task
        // serves its end, the next one's checks and its start), else read anew.
        let mut last = Some(entered);
        loop {
            let mut g = self.lock(py);
            let now = last.take().unwrap_or_else(Instant::now);
            if g.closing {
                g.threads -= 1;
                drop(g);
                self.leave_calls(&slot);
                return Ok(RunAnswer::Exit);
            }
            // Results wait up to `report_delay` for more to share their message.
            let due = g
                .reports_since
                .is_some_and(|t| now.saturating_duration_since(t) >= self.report_delay);
            if due && !g.wake_pending {
                g.wake_pending = true;
                return Ok(RunAnswer::Wake);
            }
            if now.duration_since(entered) >= SLICE {
                return Ok(RunAnswer::Again);
            }
            if g.reports_since.is_some() && !g.wake_pending && g.m.runnable() {
                // The next task may run long: have the loop send these reports
                // `report_delay` from now whether or not it has finished.
                g.wake_pending = true;
                return Ok(RunAnswer::WakeLater);
            }
            let started = now.duration_since(self.epoch).as_secs_f64();
            let Some(job) = g.m.take_ready(started) else {
                if g.reports_since.is_some() && !g.wake_pending {
                    g.wake_pending = true; // nothing else to run here: report now
                    return Ok(RunAnswer::Wake);
                }
                if self.surplus(&g) {
                    g.threads -= 1;
                    drop(g);
                    self.leave_calls(&slot);
                    return Ok(RunAnswer::Exit);
                }
                drop(g);
                self.wait_for_work(py);
                continue;
            };
            let mut deps = Vec::with_capacity(job.deps.len());
            let mut lost = None;
            let mut spilled = Vec::new(); // indices in `deps` of spill handles
            for &d in &job.deps {
                let key = key_of(&g.m, d);
                let slot = g.m.keys.get(d);
                match &slot.value {
                    Some(v) => {
                        if slot.spilled().is_some() {
                            spilled.push(deps.len());
                        }
                        deps.push((key, v.clone_ref(py)));
                    }
                    None => lost = Some(key),
                }
            }
            let entry = match (&mut g.record, &lost) {
                (Some(record), None) => Some(record.enter(job.id)),
                _ => None,
            };
            drop(g);
            let start = now;
            let result = match lost {
                Some(key) => Err(self.lost_dependency(py, &key, &job)?),
                None => match self.load_spilled(py, &mut deps, &spilled) {
                    Err(e) => Err(e),
                    Ok(()) => {
                        CURRENT.with(|c| c.set(Some((job.id, job.instance))));
                        slot.store(u64::from(job.id) + 1, Ordering::Relaxed);
                        let r = self.call(py, &job, &deps);
                        slot.store(0, Ordering::Relaxed);
                        CURRENT.with(|c| c.set(None));
                        r
                    }
                },
            };
            let end = Instant::now();
            last = Some(end);
            let seconds = end.duration_since(start).as_secs_f64();
            drop(deps);
            let mut g = self.lock(py);
            if let (Some(record), Some(entry)) = (&mut g.record, entry) {
                record.leave(entry);
            }
            if g.stream.wants() {
                let done = result.as_ref().ok().map(|(v, n)| (v.bind(py), *n));
                self.keep_sample(&mut g, job.key, start, seconds, done);
            }
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
                g.reports_since = Some(end);
            }
            self.wake_threads(&g);
            let spill = g.m.over_target();
            Self::unlock(g);
            drop(unreported);
            if spill {
                return Ok(RunAnswer::Spill);
            }
        }
    }

    /// A new task thread is about to call `run`.
    fn add_thread(&self, py: Python<'_>) {
        self.lock(py).threads += 1;
    }

    /// Stop: waiting threads leave, running ones leave after their task.
    fn close(&self, py: Python<'_>) {
        let mut g = self.lock(py);
        g.closing = true;
        self.work.notify_all();
    }

    /// Running tasks and seconds since they started (heartbeats).
    fn executing(&self, py: Python<'_>) -> Vec<(u32, f64)> {
        let now = self.now();
        let g = self.lock(py);
        g.m.executing()
            .map(|(id, start)| (id, now - start))
            .collect()
    }

    /// `(Python thread ident, task id)` of each call running now; read with
    /// `sys._current_frames()` for call stacks and the profiler.
    fn running_calls(&self) -> Vec<(u64, u32)> {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        calls
            .iter()
            .filter_map(|(ident, slot)| {
                let task = slot.load(Ordering::Relaxed).checked_sub(1)?;
                Some((*ident, u32::try_from(task).ok()?))
            })
            .collect()
    }

    /// The task the calling thread runs, if any.
    #[staticmethod]
    fn current_task() -> Option<u32> {
        CURRENT.with(Cell::get).map(|(id, _)| id)
    }

    /// Seconds since `task` started.
    fn elapsed(&self, py: Python<'_>, task: u32) -> Option<f64> {
        let now = self.now();
        self.lock(py).m.started(task).map(|s| now - s)
    }

    /// `secede()` from the thread running `task`: `None` if nothing changed, else
    /// `(run_id to report as long-running or None, whether another thread is needed)`.
    fn secede(&self, py: Python<'_>, task: u32) -> Option<(Option<u64>, bool)> {
        let instance = current_call(task)?;
        let mut g = self.lock(py);
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
        if self.lock(py).m.rejoin(instance) {
            return;
        }
        py.detach(|| {
            let mut g = self.lock_detached();
            while !g.closing && !g.m.poll_rejoin(instance) {
                g = self.sleep(g);
            }
        });
    }
}

impl WorkerCore {
    /// The calling thread's slot in `calls`, made and registered on its first `run`.
    fn call_slot(&self) -> Arc<AtomicU64> {
        let me = std::ptr::from_ref(self) as usize;
        SLOT.with(|cell| {
            let mut mine = cell.borrow_mut();
            if let Some((owner, slot)) = mine.as_ref() {
                if *owner == me {
                    return Arc::clone(slot);
                }
            }
            let slot = Arc::new(AtomicU64::new(0));
            // SAFETY: reads the calling thread's identifier; no precondition.
            #[allow(clippy::useless_conversion)] // c_ulong is u32 on some platforms
            let ident = u64::from(unsafe { pyo3::ffi::PyThread_get_thread_ident() });
            self.calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((ident, Arc::clone(&slot)));
            *mine = Some((me, Arc::clone(&slot)));
            slot
        })
    }

    /// The calling thread leaves the task loop: its slot goes.
    fn leave_calls(&self, slot: &Arc<AtomicU64>) {
        SLOT.with(|cell| cell.borrow_mut().take());
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(_, s)| !Arc::ptr_eq(s, slot));
    }
}
