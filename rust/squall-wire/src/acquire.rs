//! `acquire-replicas` messages (docs/protocol.md#scheduler--worker): the core's
//! [`Command::AcquireReplica`]s of a drained batch, one message per destination and
//! retiring holder, with the task ids and their keys.

use crate::keys::put_key;
use squall_core::{Command, Scheduler};
use std::collections::BTreeMap;

/// One `acquire-replicas` message: `worker` fetches `tasks` (whose keys `keys` lists,
/// as `encode_keys` does) from the worker at `holder`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Acquire {
    pub worker: u32,
    pub holder: String,
    pub tasks: Vec<u32>,
    pub keys: Vec<u8>,
}

/// The acquire-replica commands of `cmds`, grouped by (destination, holder) in that
/// order.
pub fn encode_acquire(s: &Scheduler, cmds: &[Command]) -> Vec<Acquire> {
    let mut out: BTreeMap<(u32, u32), Acquire> = BTreeMap::new();
    for c in cmds {
        let Command::AcquireReplica {
            worker,
            task,
            holder,
        } = *c
        else {
            continue;
        };
        let Some(ts) = s.task_slot(task) else {
            continue;
        };
        let m = out.entry((worker.0, holder.0)).or_insert_with(|| Acquire {
            worker: worker.0,
            holder: s.worker(holder).address.clone(),
            ..Default::default()
        });
        m.tasks.push(task.0);
        put_key(&mut m.keys, ts.key().as_bytes());
    }
    out.into_values().collect()
}
