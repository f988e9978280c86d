//! Client events: futures wanted and released, cancellation, retries, scattered data.

use super::Scheduler;
use crate::convert::{key_from_py, packed};
use pyo3::prelude::*;
use squall_core::{ClientId, Scattered, TaskId};

#[pymethods]
impl Scheduler {
    /// The client (or pseudo-client) holds these keys: they stay alive until it releases
    /// them; one already in memory or erred is notified to it. Raises on an unknown
    /// key, before anything changes.
    #[pyo3(signature = (client, keys, *, now))]
    fn client_desires_keys(
        &mut self,
        py: Python<'_>,
        client: u32,
        keys: Vec<Bound<'_, PyAny>>,
        now: f64,
    ) -> PyResult<()> {
        self.on_keys(py, &keys, |s, keys| {
            s.client_desires_keys(ClientId(client), keys, now)
        })
    }

    #[pyo3(signature = (client, keys, *, now))]
    fn client_releases_keys(
        &mut self,
        py: Python<'_>,
        client: u32,
        keys: Vec<Bound<'_, PyAny>>,
        now: f64,
    ) -> PyResult<()> {
        self.on_keys(py, &keys, |s, keys| {
            s.client_releases_keys(ClientId(client), keys, now)
        })
    }

    /// Releases tasks by id (packed little-endian u32).
    #[pyo3(signature = (client, tasks, *, now))]
    fn client_releases_tasks(
        &mut self,
        py: Python<'_>,
        client: u32,
        tasks: &[u8],
        now: f64,
    ) -> PyResult<()> {
        let tasks: Vec<TaskId> = packed::<u32>(tasks, "tasks")?
            .into_iter()
            .map(TaskId)
            .collect();
        self.core(py, move |s| {
            s.client_releases_tasks(ClientId(client), &tasks, now)
        })
    }

    #[pyo3(signature = (client, keys, *, now, force=false))]
    fn cancel(
        &mut self,
        py: Python<'_>,
        client: u32,
        keys: Vec<Bound<'_, PyAny>>,
        now: f64,
        force: bool,
    ) -> PyResult<()> {
        self.on_keys(py, &keys, |s, keys| {
            s.cancel_keys(ClientId(client), keys, force, now)
        })
    }

    #[pyo3(signature = (keys, *, now))]
    fn retry(&mut self, py: Python<'_>, keys: Vec<Bound<'_, PyAny>>, now: f64) -> PyResult<()> {
        self.on_keys(py, &keys, |s, keys| s.retry(keys, now))
    }

    #[pyo3(signature = (client, *, now))]
    fn remove_client(&mut self, py: Python<'_>, client: u32, now: f64) -> PyResult<()> {
        self.core(py, move |s| s.remove_client(ClientId(client), now))
    }

    /// Releases every key given to `fire_and_forget` (restart).
    #[pyo3(signature = (*, now))]
    fn release_fire_and_forget_keys(&mut self, py: Python<'_>, now: f64) -> PyResult<()> {
        self.core(py, move |s| s.release_fire_and_forget_keys(now))
    }

    #[pyo3(signature = (keys, *, now))]
    fn fire_and_forget(
        &mut self,
        py: Python<'_>,
        keys: Vec<Bound<'_, PyAny>>,
        now: f64,
    ) -> PyResult<()> {
        self.on_keys(py, &keys, |s, keys| s.fire_and_forget(keys, now))
    }

    /// Data a client placed on workers: `items` = [(key, nbytes, holder addresses)].
    /// Refused as a whole (naming the key) if a holder is unknown or a key exists in
    /// another state than memory. Returns task ids.
    #[pyo3(signature = (client, items, *, now))]
    fn scatter(
        &mut self,
        py: Python<'_>,
        client: u32,
        items: Vec<(Bound<'_, PyAny>, i64, Vec<String>)>,
        now: f64,
    ) -> PyResult<Vec<u32>> {
        let items = items
            .into_iter()
            .map(|(k, nbytes, holders)| {
                Ok(Scattered {
                    key: key_from_py(&k)?,
                    nbytes,
                    holders,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let ids = self.core(py, move |s| s.scatter(ClientId(client), &items, now))?;
        Ok(ids.into_iter().map(|t| t.0).collect())
    }
}
