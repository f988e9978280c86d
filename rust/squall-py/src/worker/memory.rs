//! Spilling and pausing (docs/runtime.md#memory): the worker's memory monitor reads the
//! machine's totals, asks for the least recently used values, writes them out itself
//! (off the machine's lock) and swaps each for its spill handle if it is still the
//! value written. Task threads load a spilled dependency through its handle's `load()`.

use super::{key_of, WorkerCore};
use crate::convert::{key_from_py, key_to_py};
use pyo3::prelude::*;
use squall_core::Key;
use squall_worker::KeyId;

#[pymethods]
impl WorkerCore {
    /// `(managed bytes in memory, their sizes when spilled, bytes on disk, values spilled)`.
    fn memory(&self, py: Python<'_>) -> (i64, i64, i64, usize) {
        let m = self.lock(py).m.memory();
        (m.managed, m.spilled_memory, m.spilled_disk, m.spilled)
    }

    /// Values in memory to spill, least recently used first, adding up to `nbytes`:
    /// `[(key id, key, value)]`.
    #[allow(clippy::type_complexity)]
    fn spill_candidates<'py>(
        &self,
        py: Python<'py>,
        nbytes: i64,
    ) -> PyResult<Vec<(u32, Bound<'py, PyAny>, Py<PyAny>)>> {
        let picked: Vec<(KeyId, Key, Py<PyAny>)> = {
            let g = self.lock(py);
            let ks = g.m.spill_candidates(nbytes);
            ks.into_iter()
                .filter_map(|k| {
                    let value = g.m.keys.get(k).value.as_ref()?.clone_ref(py);
                    Some((k, key_of(&g.m, k), value))
                })
                .collect()
        };
        // Keys become Python objects after unlocking (allocating may run `__del__`).
        picked
            .into_iter()
            .map(|(k, key, value)| Ok((k.0, key_to_py(py, &key)?, value)))
            .collect()
    }

    /// `value` of `key` (id `key_id`) was written out as `disk` bytes: `handle`
    /// replaces it if it is still that very object; returns whether it did (if not,
    /// the handle is dropped, which deletes what it wrote).
    fn spilled(
        &self,
        py: Python<'_>,
        key_id: u32,
        key: &Bound<'_, PyAny>,
        value: Py<PyAny>,
        handle: Py<PyAny>,
        disk: i64,
    ) -> PyResult<bool> {
        let key = key_from_py(key)?;
        let mut g = self.lock(py);
        let same = |v: &Py<PyAny>| v.is(&value);
        let refused =
            g.m.spilled(KeyId(key_id), key.as_bytes(), same, handle, disk)
                .err();
        Self::unlock(g);
        Ok(refused.is_none())
    }

    /// Managed bytes above which task threads spill (`run` returns 4) before taking
    /// the next task; None: never.
    fn set_spill_target(&self, py: Python<'_>, target: Option<i64>) {
        self.lock(py).m.set_spill_target(target);
    }

    /// Paused, no task starts (running ones finish); resuming wakes the task threads.
    fn set_paused(&self, py: Python<'_>, paused: bool) {
        let mut g = self.lock(py);
        g.m.set_paused(paused);
        self.wake_threads(&g);
    }
}
