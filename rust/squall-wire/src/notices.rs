//! The per-task notices of a drained command batch, grouped per recipient and op:
//! `free-keys` / `remove-replicas` to workers as packed u32 task ids, and
//! `key-in-memory` / `lost-data` / `task-retried` / `cancelled-keys` to clients as key
//! lists. Other commands travel one message each.

use crate::keys::put_key;
use crate::packed;
use squall_core::{Command, Scheduler};
use std::collections::BTreeMap;

/// Payloads by (worker or client id, op).
#[derive(Default)]
pub struct Notices {
    pub to_workers: BTreeMap<(u32, &'static str), Vec<u8>>,
    pub to_clients: BTreeMap<(u32, &'static str), Vec<u8>>,
}

pub fn encode_notices(s: &Scheduler, cmds: &[Command]) -> Notices {
    let mut n = Notices::default();
    for c in cmds {
        let (to, op, task) = match *c {
            Command::FreeKeys { worker, task } => (worker.0, "free-keys", task),
            Command::RemoveReplicas { worker, task } => (worker.0, "remove-replicas", task),
            Command::KeyInMemory { client, task } => (client.0, "key-in-memory", task),
            Command::LostData { client, task } => (client.0, "lost-data", task),
            Command::TaskRetried { client, task } => (client.0, "task-retried", task),
            Command::CancelledKeys { client, task, .. } => (client.0, "cancelled-keys", task),
            _ => continue,
        };
        if matches!(c, Command::FreeKeys { .. } | Command::RemoveReplicas { .. }) {
            packed::put(n.to_workers.entry((to, op)).or_default(), task.0);
        } else if let Some(ts) = s.task_slot(task) {
            put_key(n.to_clients.entry((to, op)).or_default(), ts.key.as_bytes());
        }
    }
    n
}
