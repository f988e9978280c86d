//! The drained commands, and `who-has` replies, as wire payloads (formats:
//! squall-wire).

use super::Scheduler;
use crate::commands::Commands;
use crate::errors::wire_error;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use squall_wire::{acquire, compute, keys, notices, who_has};
use std::collections::BTreeMap;

/// Payloads per (recipient, op), as Python data.
type Payloads<'py> = Vec<(u32, &'static str, Bound<'py, PyBytes>)>;

#[pymethods]
impl Scheduler {
    /// The commands produced since the last call. Their task ids resolve (`key_of`)
    /// until the next call.
    fn take_commands(&mut self) -> Commands {
        Commands::new(self.inner.take_commands())
    }

    /// The compute-task commands of `cmds` (from the last `take_commands`), grouped by
    /// worker and encoded as wire payloads: {worker: (address table, payload, count)}.
    /// Each worker is sent a blob once (docs/protocol.md#compute).
    fn encode_compute<'py>(
        &mut self,
        py: Python<'py>,
        cmds: &Commands,
    ) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (w, batch) in
            compute::encode_compute(&self.inner, cmds.commands(), &mut self.sent_blobs)
        {
            let payload = PyBytes::new(py, &batch.payload);
            out.set_item(w.0, (batch.addresses, payload, batch.count))?;
        }
        Ok(out)
    }

    /// The per-task notices of `cmds` as one payload per recipient and op:
    /// `([(worker, op, packed u32 tasks)], [(client, op, encoded keys)])`.
    fn encode_notices<'py>(
        &self,
        py: Python<'py>,
        cmds: &Commands,
    ) -> (Payloads<'py>, Payloads<'py>) {
        let n = notices::encode_notices(&self.inner, cmds.commands());
        let out = |m: BTreeMap<(u32, &'static str), Vec<u8>>| {
            m.into_iter()
                .map(|((to, op), b)| (to, op, PyBytes::new(py, &b)))
                .collect()
        };
        (out(n.to_workers), out(n.to_clients))
    }

    /// The acquire-replica commands of `cmds` as `acquire-replicas` messages, one per
    /// destination and retiring holder: `[(worker, holder address, task ids, encoded
    /// keys)]`.
    #[allow(clippy::type_complexity)]
    fn encode_acquire<'py>(
        &self,
        py: Python<'py>,
        cmds: &Commands,
    ) -> Vec<(u32, String, Vec<u32>, Bound<'py, PyBytes>)> {
        acquire::encode_acquire(&self.inner, cmds.commands())
            .into_iter()
            .map(|a| (a.worker, a.holder, a.tasks, PyBytes::new(py, &a.keys)))
            .collect()
    }

    /// Who holds these keys (`encode_keys` form), packed for the `who-has` reply:
    /// `(addresses, payload)` where the payload holds, per key in order, a u16 count
    /// then that many u16 indices into `addresses` (unknown keys: count 0).
    fn who_has_wire<'py>(
        &self,
        py: Python<'py>,
        keys: &[u8],
    ) -> PyResult<(Vec<String>, Bound<'py, PyBytes>)> {
        let keys = keys::read_keys(keys).map_err(wire_error)?;
        let (addresses, payload) = who_has::encode_who_has(&self.inner, &keys);
        Ok((addresses, PyBytes::new(py, &payload)))
    }
}
