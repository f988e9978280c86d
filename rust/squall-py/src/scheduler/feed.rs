//! The transition feed, for the scheduler's plugins (docs/runtime.md#scheduler-plugins).

use super::Scheduler;
use crate::convert::key_to_py;
use pyo3::prelude::*;
use pyo3::types::PyString;
use squall_core::TaskState;

/// One fed transition as Python sees it: (key, start, finish, stimulus).
type Fed<'py> = (
    Bound<'py, PyAny>,
    Bound<'py, PyString>,
    Bound<'py, PyString>,
    u64,
);

#[pymethods]
impl Scheduler {
    /// Whether the core keeps every transition for `take_transitions` (off by default).
    #[getter]
    fn get_transition_feed(&self) -> bool {
        self.inner.transition_feed()
    }

    /// Switching off drops the transitions not taken.
    #[setter]
    fn set_transition_feed(&mut self, on: bool) {
        self.inner.set_transition_feed(on);
    }

    /// The oldest `limit` transitions not taken yet (all: None), oldest first, as (key,
    /// start, finish, stimulus) with distributed's state names (interned). A key
    /// transitioning several times in a row is one Python object.
    #[pyo3(signature = (limit=None))]
    fn take_transitions<'py>(
        &mut self,
        py: Python<'py>,
        limit: Option<usize>,
    ) -> PyResult<Vec<Fed<'py>>> {
        let names = TaskState::ALL.map(|s| PyString::intern(py, s.name()));
        let fed = self.inner.take_transitions(limit.unwrap_or(usize::MAX));
        let mut out = Vec::with_capacity(fed.len());
        let mut last: Option<(usize, Bound<'py, PyAny>)> = None;
        for (i, e) in fed.iter().enumerate() {
            let key = match &last {
                Some((j, k)) if fed[*j].key == e.key => k.clone(),
                _ => key_to_py(py, &e.key)?,
            };
            last = Some((i, key.clone()));
            let (start, finish) = (&names[e.start as usize], &names[e.finish as usize]);
            out.push((key, start.clone(), finish.clone(), e.stimulus));
        }
        Ok(out)
    }
}
