//! The sampled task stream and the load counts a worker's heartbeats carry
//! (docs/runtime.md#task-stream). The task loop keeps a decimating sample of the
//! tasks it ran (`squall_worker::Sampler`): asking whether a task is sampled is an
//! increment and a compare; only a sampled task's key bytes are copied.

use super::{Inner, WorkerCore};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use squall_wire::keys::write_keys;
use squall_worker::KeyId;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A task that ran: its key (encoded), when (seconds since the core's epoch), on
/// which task thread, and, if it succeeded, its result's size and type name.
pub(super) struct TaskSample {
    key: Box<[u8]>,
    start: f64,
    stop: f64,
    thread: u32,
    result: Option<(i64, Box<str>)>,
}

/// What a heartbeat says of a sampled task: start, stop (epoch seconds), thread,
/// succeeded, result bytes and type name (0 and "" for a failure).
type SampleTimes = (f64, f64, u32, bool, i64, String);

thread_local! {
    /// A small number naming this task thread in the stream, given by its worker's
    /// `next_thread` on first use (a task thread serves one worker).
    static THREAD: Cell<Option<u32>> = const { Cell::new(None) };
}

/// The value's type as `dask.utils.typename` names it (distributed's records use it):
/// `int`, `numpy.ndarray` (the module unless it is `builtins`).
fn typename(value: &Bound<'_, PyAny>) -> String {
    let ty = value.get_type();
    let name = ty.name().map(|n| n.to_string()).unwrap_or_default();
    match ty.module().map(|m| m.to_string()) {
        Ok(module) if !module.is_empty() && module != "builtins" => format!("{module}.{name}"),
        _ => name,
    }
}

impl WorkerCore {
    fn thread_index(&self) -> u32 {
        THREAD.with(|t| match t.get() {
            Some(i) => i,
            None => {
                let i = self.next_thread.fetch_add(1, Ordering::Relaxed);
                t.set(Some(i));
                i
            }
        })
    }

    /// Keeps the task `run` just ran, which `g.stream.wants()` picked, with its
    /// result's size and type name if it succeeded (a Python call for sampled tasks
    /// only).
    pub(super) fn keep_sample(
        &self,
        g: &mut Inner,
        key: KeyId,
        start: Instant,
        seconds: f64,
        result: Option<(&Bound<'_, PyAny>, i64)>,
    ) {
        let start = start.duration_since(self.epoch).as_secs_f64();
        let key = g.m.keys.get(key).bytes.clone();
        let result = result.map(|(value, nbytes)| (nbytes, typename(value).into_boxed_str()));
        g.stream.keep(TaskSample {
            key,
            start,
            stop: start + seconds,
            thread: self.thread_index(),
            result,
        });
    }
}

#[pymethods]
impl WorkerCore {
    /// The tasks sampled since the last call: their keys (`encode_keys` form),
    /// `[(start, stop, thread, ok, nbytes, typename)]` in the same order (epoch
    /// seconds; 0 and "" for a failed task), and how many tasks ran meanwhile (all of
    /// them while fewer than the sampler's capacity).
    fn take_task_stream<'py>(
        &self,
        py: Python<'py>,
    ) -> (Bound<'py, PyBytes>, Vec<SampleTimes>, u64) {
        let (samples, ran) = self.lock(py).stream.drain();
        // Read now, so that the monotonic clock's drift from the wall clock since the
        // core started does not shift the times.
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let offset = wall - self.now();
        let keys = PyBytes::new(py, &write_keys(samples.iter().map(|s| &s.key[..])));
        let times = samples
            .into_iter()
            .map(|s| {
                let (ok, (nbytes, typename)) = match s.result {
                    Some((nbytes, name)) => (true, (nbytes, name.into_string())),
                    None => (false, (0, String::new())),
                };
                let (start, stop) = (s.start + offset, s.stop + offset);
                (start, stop, s.thread, ok, nbytes, typename)
            })
            .collect();
        (keys, times, ran)
    }

    /// `(executing, ready, in_flight, in_memory)`: tasks running and ready to run,
    /// keys being fetched and held (in memory or spilled). Counters, and one pass over
    /// the ready heap (heartbeats, not the task path).
    fn counts(&self, py: Python<'_>) -> (usize, usize, usize, usize) {
        let c = self.lock(py).m.counts();
        (c.executing, c.ready, c.in_flight, c.in_memory)
    }
}
