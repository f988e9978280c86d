//! Cluster-wide counters for the dashboard and metrics (docs/dashboard.md): kept where
//! the event happens (an integer add), read in O(prefixes + groups + workers), never by
//! a pass over the tasks.

use crate::group::{TaskGroup, TaskPrefix};
use crate::ids::{GroupId, PrefixId};
use crate::state::Scheduler;
use crate::task::TaskState;
use crate::worker::WorkerStatus;

/// Counters the core bumps as things happen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Live tasks in each state (indexed by `TaskState as usize`); the `Forgotten` slot
    /// counts every task ever forgotten, since a forgotten task never changes again.
    pub state_counts: [u64; 8],
    /// Results that came back from a worker's compute (processing → memory).
    pub tasks_computed: u64,
    pub workers_added: u64,
    pub workers_removed: u64,
}

/// Monotonic totals over the scheduler's life, summed over prefixes on reading.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub tasks_forgotten: u64,
    pub tasks_computed: u64,
    /// Entries into `erred`.
    pub tasks_erred: u64,
    /// Times a task was marked suspicious (its worker died while running it).
    pub tasks_suspicious: u64,
    pub transitions: u64,
    pub workers_added: u64,
    pub workers_removed: u64,
    pub compute_seconds: f64,
    pub transfer_seconds: f64,
}

/// Workers by how busy they are (the split of Dask's `workers{state}` metric).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStates {
    pub idle: usize,
    pub partially_saturated: usize,
    pub saturated: usize,
    pub paused: usize,
    /// Closing gracefully.
    pub retiring: usize,
}

impl Scheduler {
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Live tasks in state `s` (for `Forgotten`: tasks ever forgotten).
    pub fn count_in(&self, s: TaskState) -> u64 {
        self.counters.state_counts[s as usize]
    }

    pub fn totals(&self) -> Totals {
        let c = &self.counters;
        let mut t = Totals {
            tasks_forgotten: c.state_counts[TaskState::Forgotten as usize],
            tasks_computed: c.tasks_computed,
            transitions: self.transition_counter,
            workers_added: c.workers_added,
            workers_removed: c.workers_removed,
            ..Totals::default()
        };
        for p in &self.prefixes {
            t.tasks_erred += p.state_totals[TaskState::Erred as usize];
            t.tasks_suspicious += p.suspicious;
            t.compute_seconds += p.compute_total;
            t.transfer_seconds += p.seconds_of("transfer");
        }
        t
    }

    /// Tasks some unfinished task still waits on (distributed's `waiting_data` of
    /// `/json/counts.json`). A pass over the tasks: for that route only, never the
    /// dashboard's polling.
    pub fn n_tasks_with_waiters(&self) -> usize {
        self.task_ids()
            .filter(|&t| !self.task(t).waiters.is_empty())
            .count()
    }

    /// O(workers): paused ones are counted, the other figures are set sizes.
    pub fn worker_states(&self) -> WorkerStates {
        let paused = self
            .worker_ids()
            .filter(|&w| self.worker(w).status == WorkerStatus::Paused)
            .count();
        let running = self.running.len();
        WorkerStates {
            idle: self.idle.len(),
            partially_saturated: running.saturating_sub(self.idle.len() + self.saturated.len()),
            saturated: self.saturated.len(),
            paused,
            retiring: self.n_workers().saturating_sub(paused + running),
        }
    }

    /// Every prefix ever seen, in first-seen order (prefixes are never dropped).
    pub fn task_prefixes(&self) -> impl Iterator<Item = (PrefixId, &TaskPrefix)> + '_ {
        self.prefixes
            .iter()
            .enumerate()
            .map(|(i, p)| (PrefixId(i as u32), p))
    }

    /// The groups that still hold a task that is not forgotten, in slot order.
    pub fn task_groups(&self) -> impl Iterator<Item = (GroupId, &TaskGroup)> + '_ {
        self.groups
            .iter()
            .enumerate()
            .filter_map(|(i, g)| Some((GroupId(i as u32), g.as_ref()?)))
    }

    /// The group a `(slot, uid)` reference names, if that group still exists (slots are
    /// reused: a different uid means it is gone).
    pub fn group_by_ref(&self, (g, uid): (GroupId, u64)) -> Option<&TaskGroup> {
        self.groups
            .get(g.idx())?
            .as_ref()
            .filter(|group| group.uid == uid)
    }

    /// Σ nbytes_total of the prefix's live groups.
    pub fn prefix_nbytes_total(&self, p: PrefixId) -> i64 {
        self.task_groups()
            .filter(|(_, g)| g.prefix == p)
            .map(|(_, g)| g.nbytes_total)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::key::Key;
    use crate::task::TaskText;

    #[test]
    fn counts_follow_creation_transitions_and_forgetting() {
        let mut s = Scheduler::new(Config::default());
        let ids: Vec<_> = (0..5)
            .map(|i| s.create_task(TaskText::new(&Key::str(&format!("x-{i}")), None)))
            .collect();
        assert_eq!(s.count_in(TaskState::Released), 5);
        s.set_state(ids[0], TaskState::Waiting);
        s.set_state(ids[1], TaskState::Forgotten);
        s.remove_task(ids[1]);
        assert_eq!(s.count_in(TaskState::Released), 3);
        assert_eq!(s.count_in(TaskState::Waiting), 1);
        assert_eq!(s.totals().tasks_forgotten, 1);
        let (_, p) = s.task_prefixes().next().unwrap();
        assert_eq!(p.state_totals[TaskState::Released as usize], 5);
        assert_eq!(p.state_totals[TaskState::Waiting as usize], 1);
        assert_eq!(p.state_counts[TaskState::Released as usize], 3);
    }

    #[test]
    fn workers_and_their_load_are_counted() {
        use crate::worker::{WorkerLoad, WorkerSpec};
        let mut s = Scheduler::new(Config::default());
        let spec = |a: &str| WorkerSpec {
            address: a.into(),
            nthreads: 2,
            ..WorkerSpec::default()
        };
        let a = s.add_worker(spec("tcp://a:1"), 1.0).unwrap();
        let b = s.add_worker(spec("tcp://b:1"), 1.0).unwrap();
        s.worker_status_change(b, WorkerStatus::Paused, 1.5)
            .unwrap();
        let states = s.worker_states();
        assert_eq!((states.idle, states.paused, states.retiring), (1, 1, 0));
        let load = WorkerLoad {
            cpu: 150.0,
            executing: 2,
            ready: 3,
            ..WorkerLoad::default()
        };
        s.heartbeat(a, 2.0, None, &[], None, Some(load)).unwrap();
        assert_eq!(s.worker(a).load, load);
        s.heartbeat(a, 3.0, None, &[], None, None).unwrap();
        assert_eq!(
            s.worker(a).load,
            load,
            "a heartbeat without load keeps the last"
        );
        s.remove_worker(a, false, 4.0).unwrap();
        let t = s.totals();
        assert_eq!((t.workers_added, t.workers_removed), (2, 1));
        s.validate().unwrap();
    }
}
