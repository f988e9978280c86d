//! Drained commands, exposed as packed arrays (hot paths) or readable records.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use squall_core::{CancelReason, Command};
use squall_wire::ops::op_name;
use squall_wire::packed;
use std::collections::BTreeMap;

#[pyclass(module = "squall._core", frozen)]
pub struct Commands {
    cmds: Vec<Command>,
}

impl Commands {
    pub fn new(cmds: Vec<Command>) -> Self {
        Commands { cmds }
    }

    pub fn commands(&self) -> &[Command] {
        &self.cmds
    }
}

/// (recipient, task, extra): recipient is a worker id for worker ops, a client id for
/// client ops; extra is the run id / steal stimulus / blamed task / removed worker /
/// retiring holder / cancel reason (0 = cancelled, 1 = lost dependencies).
fn fields(c: &Command) -> (u32, u32, u64) {
    match *c {
        Command::ComputeTask {
            worker,
            task,
            run_id,
        } => (worker.0, task.0, run_id),
        Command::FreeKeys { worker, task } | Command::RemoveReplicas { worker, task } => {
            (worker.0, task.0, 0)
        }
        Command::StealRequest {
            worker,
            task,
            stimulus,
        } => (worker.0, task.0, stimulus),
        Command::CloseWorker { worker } | Command::RestartWorker { worker } => {
            (worker.0, u32::MAX, 0)
        }
        Command::AcquireReplica {
            worker,
            task,
            holder,
        } => (worker.0, task.0, u64::from(holder.0)),
        Command::WorkerRemoved { worker, removed } => (worker.0, u32::MAX, u64::from(removed.0)),
        Command::KeyInMemory { client, task }
        | Command::LostData { client, task }
        | Command::TaskRetried { client, task } => (client.0, task.0, 0),
        Command::TaskErred {
            client,
            task,
            blame,
        } => (client.0, task.0, u64::from(blame.0)),
        Command::CancelledKeys {
            client,
            task,
            reason,
        } => (
            client.0,
            task.0,
            u64::from(reason == CancelReason::LostDependencies),
        ),
    }
}

#[pymethods]
impl Commands {
    fn __len__(&self) -> usize {
        self.cmds.len()
    }

    /// Number of commands per op name.
    fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for c in &self.cmds {
            *m.entry(op_name(c)).or_insert(0) += 1;
        }
        m
    }

    /// Every command as (op, recipient, task, extra), in emission order.
    fn records(&self) -> Vec<(&'static str, u32, u32, u64)> {
        self.cmds
            .iter()
            .map(|c| {
                let (a, t, x) = fields(c);
                (op_name(c), a, t, x)
            })
            .collect()
    }

    /// Compute-task commands as packed little-endian (workers u32, tasks u32, run ids u64).
    fn compute(&self, py: Python<'_>) -> (Py<PyBytes>, Py<PyBytes>, Py<PyBytes>) {
        let (mut w, mut t, mut r) = (Vec::new(), Vec::new(), Vec::new());
        for c in &self.cmds {
            if let Command::ComputeTask {
                worker,
                task,
                run_id,
            } = c
            {
                packed::put(&mut w, worker.0);
                packed::put(&mut t, task.0);
                packed::put(&mut r, *run_id);
            }
        }
        (
            PyBytes::new(py, &w).unbind(),
            PyBytes::new(py, &t).unbind(),
            PyBytes::new(py, &r).unbind(),
        )
    }
}
