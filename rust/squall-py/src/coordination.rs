//! `Coordination`: the thin Python face of `squall-coord` (docs/primitives.md). The
//! scheduler room feeds it one event per request and applies the commands it drains,
//! in order; it is never called per task.

use crate::convert::{key_from_py, key_to_py};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyTuple};
use squall_coord::{Batch, Command, Coord, Outcome, Owner, Value};
use squall_core::Key;

#[pyclass(module = "squall._core")]
#[derive(Default)]
pub struct Coordination {
    inner: Coord<Key>,
}

/// One drained command: `op` is "answer" (to `holder`'s request `request`: `status`
/// is "granted", "done", "timed-out", "count" with `count`, "values" with `values`, or
/// "failed" with `error`), "hold" or "release" (of `keys`, by the pseudo-client
/// `owner`, or with `owner` None by the client `holder`).
#[pyclass(module = "squall._core", frozen, get_all)]
pub struct CoordCommand {
    op: &'static str,
    holder: Option<u32>,
    request: u64,
    owner: Option<String>,
    status: &'static str,
    count: u64,
    error: String,
    values: Py<PyList>,
    keys: Py<PyList>,
}

fn keys_to_py<'py>(py: Python<'py>, keys: &[Key]) -> PyResult<Bound<'py, PyList>> {
    let items = keys
        .iter()
        .map(|k| key_to_py(py, k))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

fn value(data: &[u8], keys: &[Bound<'_, PyAny>]) -> PyResult<Value<Key>> {
    Ok(Value {
        data: data.to_vec(),
        keys: keys.iter().map(key_from_py).collect::<PyResult<_>>()?,
    })
}

fn batch(ob: &Bound<'_, PyAny>) -> PyResult<Batch> {
    if let Ok(b) = ob.cast::<PyBool>() {
        return Ok(if b.is_true() { Batch::All } else { Batch::One });
    }
    let n: i64 = ob.extract()?;
    usize::try_from(n)
        .map(Batch::Count)
        .map_err(|_| PyValueError::new_err("batch must be a bool or a count"))
}

fn command(py: Python<'_>, c: Command<Key>) -> PyResult<CoordCommand> {
    let empty = || PyList::empty(py).unbind();
    let mut out = CoordCommand {
        op: "answer",
        holder: None,
        request: 0,
        owner: None,
        status: "",
        count: 0,
        error: String::new(),
        values: empty(),
        keys: empty(),
    };
    match c {
        Command::Answer {
            holder,
            request,
            outcome,
        } => {
            out.holder = Some(holder);
            out.request = request;
            out.status = match outcome {
                Outcome::Granted => "granted",
                Outcome::Done => "done",
                Outcome::TimedOut => "timed-out",
                Outcome::Count(n) => {
                    out.count = n;
                    "count"
                }
                Outcome::Values(values) => {
                    let items = values
                        .iter()
                        .map(|v| {
                            let data = PyBytes::new(py, &v.data).into_any();
                            PyTuple::new(py, [data, keys_to_py(py, &v.keys)?.into_any()])
                        })
                        .collect::<PyResult<Vec<_>>>()?;
                    out.values = PyList::new(py, items)?.unbind();
                    "values"
                }
                Outcome::Failed(why) => {
                    out.error = why;
                    "failed"
                }
            };
        }
        Command::Hold { owner, keys } => {
            out.op = "hold";
            set_owner(&mut out, owner);
            out.keys = keys_to_py(py, &keys)?.unbind();
        }
        Command::Release { owner, keys } => {
            out.op = "release";
            set_owner(&mut out, owner);
            out.keys = keys_to_py(py, &keys)?.unbind();
        }
    }
    Ok(out)
}

/// A variable's or a queue's pseudo-client is named `variable-<name>` / `queue-<name>`.
fn set_owner(out: &mut CoordCommand, owner: Owner) {
    match owner {
        Owner::Variable(n) => out.owner = Some(format!("variable-{n}")),
        Owner::Queue(n) => out.owner = Some(format!("queue-{n}")),
        Owner::Client(c) => out.holder = Some(c),
    }
}

/// The requests whose arguments go to the core as they come: one method each, named
/// as the core's, taking `(holder, request, <arguments>, *, now)`.
macro_rules! forwarded {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        #[pymethods]
        impl Coordination {
            $(
                #[pyo3(signature = (holder, request, $($arg,)* *, now))]
                fn $method(&mut self, holder: u32, request: u64, $($arg: $ty,)* now: f64) {
                    self.inner.$method(holder, request, $($arg,)* now);
                }
            )*
        }
    };
}

forwarded! {
    semaphore_acquire(name: &str, max_leases: u32, timeout: Option<f64>);
    semaphore_release(name: &str, lease: u64);
    semaphore_value(name: &str);
    semaphore_close(name: &str);
    multi_lock_release(lease: u64);
    event_wait(name: &str, timeout: Option<f64>);
    event_set(name: &str);
    event_clear(name: &str);
    event_is_set(name: &str);
    variable_get(name: &str, timeout: Option<f64>);
    variable_delete(name: &str);
    queue_size(name: &str, maxsize: usize);
    queue_close(name: &str);
}

/// The requests whose arguments are converted first, and the state's other methods.
#[pymethods]
impl Coordination {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    #[pyo3(signature = (holder, request, names, num_locks, timeout, *, now))]
    fn multi_lock_acquire(
        &mut self,
        holder: u32,
        request: u64,
        names: Vec<String>,
        num_locks: Option<usize>,
        timeout: Option<f64>,
        now: f64,
    ) {
        self.inner
            .multi_lock_acquire(holder, request, &names, num_locks, timeout, now);
    }

    #[pyo3(signature = (holder, request, name, data, keys, *, now))]
    fn variable_set(
        &mut self,
        holder: u32,
        request: u64,
        name: &str,
        data: &[u8],
        keys: Vec<Bound<'_, PyAny>>,
        now: f64,
    ) -> PyResult<()> {
        let v = value(data, &keys)?;
        self.inner.variable_set(holder, request, name, v, now);
        Ok(())
    }

    #[pyo3(signature = (holder, request, name, maxsize, data, keys, timeout, *, now))]
    #[allow(clippy::too_many_arguments)]
    fn queue_put(
        &mut self,
        holder: u32,
        request: u64,
        name: &str,
        maxsize: usize,
        data: &[u8],
        keys: Vec<Bound<'_, PyAny>>,
        timeout: Option<f64>,
        now: f64,
    ) -> PyResult<()> {
        let v = value(data, &keys)?;
        self.inner
            .queue_put(holder, request, name, maxsize, v, timeout, now);
        Ok(())
    }

    /// `batch`: False (one value), True (all queued now) or a count.
    #[pyo3(signature = (holder, request, name, maxsize, batch, timeout, *, now))]
    #[allow(clippy::too_many_arguments)]
    fn queue_get(
        &mut self,
        holder: u32,
        request: u64,
        name: &str,
        maxsize: usize,
        batch: &Bound<'_, PyAny>,
        timeout: Option<f64>,
        now: f64,
    ) -> PyResult<()> {
        let b = self::batch(batch)?;
        self.inner
            .queue_get(holder, request, name, maxsize, b, timeout, now);
        Ok(())
    }

    /// A client left, or the worker it lives on was removed.
    #[pyo3(signature = (holder, *, now))]
    fn holder_gone(&mut self, holder: u32, now: f64) {
        self.inner.holder_gone(holder, now);
    }

    /// Answers the waiting requests whose deadline has come.
    #[pyo3(signature = (*, now))]
    fn expire(&mut self, now: f64) {
        self.inner.expire(now);
    }

    /// The earliest deadline of a waiting request (None: none waits with one).
    fn next_deadline(&self) -> Option<f64> {
        self.inner.next_deadline()
    }

    /// The commands produced since the last call, in the order they must be applied.
    fn take_commands(&mut self, py: Python<'_>) -> PyResult<Vec<CoordCommand>> {
        self.inner
            .take_commands()
            .into_iter()
            .map(|c| command(py, c))
            .collect()
    }
}
