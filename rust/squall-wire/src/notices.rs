//! The per-task notices of a drained command batch, grouped per recipient and op:
//! `free-keys` / `remove-replicas` to workers as packed u32 task ids, and
//! `key-in-memory` / `lost-data` / `task-retried` / `cancelled-keys` to clients as key
//! lists. Other commands travel one message each.

use crate::keys::put_key;
use crate::ops::op_name;
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
        let (to, task) = match *c {
            Command::FreeKeys { worker, task } | Command::RemoveReplicas { worker, task } => {
                (worker.0, task)
            }
            Command::KeyInMemory { client, task }
            | Command::LostData { client, task }
            | Command::TaskRetried { client, task }
            | Command::CancelledKeys { client, task, .. } => (client.0, task),
            _ => continue,
        };
        let op = op_name(c);
        if matches!(c, Command::FreeKeys { .. } | Command::RemoveReplicas { .. }) {
            packed::put(n.to_workers.entry((to, op)).or_default(), task.0);
        } else if let Some(ts) = s.task_slot(task) {
            put_key(
                n.to_clients.entry((to, op)).or_default(),
                ts.key().as_bytes(),
            );
        }
    }
    n
}
