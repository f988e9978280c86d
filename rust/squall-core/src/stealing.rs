//! Work stealing (docs/scheduling.md#work-stealing): cost levels with O(1) add/remove, the periodic balance
//! pass, thief choice, and the transactional steal-request / steal-response protocol.

use crate::commands::Command;
use crate::error::{CoreError, CoreResult};
use crate::ids::{PrefixId, TaskId, WorkerId};
use crate::state::Scheduler;
use crate::stimuli::{Slots, Stimulus};
use crate::task::{TaskState as S, NOT_BINNED};
use crate::tasklist::TaskList;
use crate::worker::{IdIndexMap, IdIndexSet};

pub const LEVELS: usize = 15;
/// Seconds added to every transfer estimate (not configurable upstream either).
const LATENCY: f64 = 0.1;

/// The victim's view of a task it was asked to give up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerTaskState {
    Released,
    Waiting,
    Ready,
    Constrained,
    Executing,
    LongRunning,
    Memory,
    Cancelled,
    Resumed,
    Fetch,
    Flight,
    Missing,
    Error,
    Rescheduled,
    Forgotten,
}

impl WorkerTaskState {
    pub fn parse(s: &str) -> Option<Self> {
        use WorkerTaskState::*;
        Some(match s {
            "released" => Released,
            "waiting" => Waiting,
            "ready" => Ready,
            "constrained" => Constrained,
            "executing" => Executing,
            "long-running" => LongRunning,
            "memory" => Memory,
            "cancelled" => Cancelled,
            "resumed" => Resumed,
            "fetch" => Fetch,
            "flight" => Flight,
            "missing" => Missing,
            "error" => Error,
            "rescheduled" => Rescheduled,
            "forgotten" => Forgotten,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
pub(crate) struct InFlight {
    victim: WorkerId,
    thief: WorkerId,
    victim_duration: f64,
    thief_duration: f64,
    stimulus: u64,
}

#[derive(Default)]
pub struct Stealing {
    pub(crate) last_balance: f64,
    /// Per worker slot: tasks per level.
    stealable: Vec<Option<Box<[TaskList; LEVELS]>>>,
    /// Tasks in the bins (each binned task's level is in its `steal_level`, its place
    /// in the bin in its `bin_place`).
    n_binned: usize,
    in_flight: IdIndexMap<TaskId, InFlight>,
    in_flight_occupancy: IdIndexMap<WorkerId, f64>,
    in_flight_tasks: IdIndexMap<WorkerId, i64>,
    /// Tasks binned with a fallback duration, re-binned once their prefix is measured.
    unknown_durations: IdIndexMap<PrefixId, IdIndexSet<TaskId>>,
    counter: u64,
    /// Steal requests sent / moves confirmed.
    pub requests: u64,
    pub moves: u64,
}

/// Python's `round` (half to even).
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        2.0 * (x / 2.0).round()
    } else {
        r
    }
}

impl Stealing {
    fn bins(&mut self, w: WorkerId) -> &mut [TaskList; LEVELS] {
        if self.stealable.len() <= w.idx() {
            self.stealable.resize_with(w.idx() + 1, || None);
        }
        self.stealable[w.idx()].get_or_insert_with(Default::default)
    }

    pub fn n_stealable(&self) -> usize {
        self.n_binned
    }

    pub fn n_in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

impl Scheduler {
    /// `steal_time_ratio`: (level) or None when the task is not worth stealing.
    /// An actor is never stolen: its placement balances actors across workers, and
    /// its instance must live where the scheduler sent it (docs/actors.md).
    pub(crate) fn steal_level(&self, t: TaskId) -> Option<u8> {
        if self.task(t).is_actor() {
            return None;
        }
        let p = self.prefix_of(t);
        if self.prefix(p).fast {
            return None;
        }
        let ts = self.task(t);
        if ts.dependencies.is_empty() {
            return Some(0);
        }
        let compute = self.prefix_duration(p);
        if compute == 0.0 {
            return None;
        }
        let bytes: i64 = ts.dependencies.iter().map(|d| self.eff_nbytes(d)).sum();
        let transfer = bytes as f64 / self.bandwidth + LATENCY;
        let level = round_half_even((transfer / compute).log2() + 6.0).max(1.0);
        (level < LEVELS as f64).then_some(level as u8)
    }

    pub(crate) fn put_key_in_stealable(&mut self, t: TaskId) {
        let Some(w) = self.task(t).processing_on() else {
            return;
        };
        let Some(level) = self.steal_level(t) else {
            return;
        };
        let place = self.stealing.bins(w)[level as usize].push(t);
        self.stealing.n_binned += 1;
        let ts = self.tm(t);
        ts.steal_level = level;
        ts.set_bin_place(place);
        let p = self.prefix_of(t);
        if !self.prefix_duration_known(p) {
            self.stealing
                .unknown_durations
                .entry(p)
                .or_default()
                .insert(t);
        }
    }

    pub(crate) fn stealing_remove_key(&mut self, t: TaskId) {
        let Some(ts) = self.tasks.get_mut(t.idx()).and_then(Option::as_mut) else {
            return;
        };
        let level = std::mem::replace(&mut ts.steal_level, NOT_BINNED);
        if level == NOT_BINNED {
            return;
        }
        // Binned tasks are processing: their worker is the bins'.
        let w = ts.processing_on().expect("binned tasks are processing");
        let place = ts.bin_place();
        if let Some(moved) = self.stealing.bins(w)[level as usize].remove(t, place) {
            self.tm(moved).set_bin_place(place);
        }
        self.stealing.n_binned -= 1;
    }

    fn remove_from_in_flight(&mut self, t: TaskId) -> Option<InFlight> {
        let d = self.stealing.in_flight.swap_remove(&t)?;
        let st = &mut self.stealing;
        *st.in_flight_occupancy.entry(d.victim).or_insert(0.0) += d.victim_duration;
        *st.in_flight_occupancy.entry(d.thief).or_insert(0.0) -= d.thief_duration;
        *st.in_flight_tasks.entry(d.victim).or_insert(0) += 1;
        *st.in_flight_tasks.entry(d.thief).or_insert(0) -= 1;
        if st.in_flight.is_empty() {
            st.in_flight_occupancy.clear();
            st.in_flight_tasks.clear();
        }
        Some(d)
    }

    /// The stealing plugin's transition hook.
    pub(crate) fn stealing_on_transition(&mut self, t: TaskId, start: S, finish: S) {
        if !self.config.work_stealing {
            return;
        }
        if finish == S::Processing {
            self.put_key_in_stealable(t);
        } else if start == S::Processing {
            // (`transition` took it out of the bins already.)
            self.remove_from_in_flight(t);
            if finish == S::Memory {
                let p = self.prefix_of(t);
                if let Some(tasks) = self.stealing.unknown_durations.swap_remove(&p) {
                    for tt in tasks {
                        if self.get_task(tt).is_some_and(|x| x.state == S::Processing) {
                            self.stealing_remove_key(tt);
                            self.put_key_in_stealable(tt);
                        }
                    }
                }
            }
        }
    }

    pub(crate) fn stealing_remove_worker(&mut self, w: WorkerId) {
        if let Some(slot) = self.stealing.stealable.get_mut(w.idx()) {
            if let Some(bins) = slot.take() {
                for level in bins.iter() {
                    for t in level.iter() {
                        if let Some(ts) = self.tasks.get_mut(t.idx()).and_then(Option::as_mut) {
                            ts.steal_level = NOT_BINNED;
                            self.stealing.n_binned -= 1;
                        }
                    }
                }
            }
        }
    }

    fn combined_occupancy(&self, w: WorkerId, snapshot: &[f64]) -> f64 {
        snapshot[w.idx()]
            + self
                .stealing
                .in_flight_occupancy
                .get(&w)
                .copied()
                .unwrap_or(0.0)
    }

    fn combined_nprocessing(&self, w: WorkerId) -> i64 {
        self.worker(w).processing.len() as i64
            + self.stealing.in_flight_tasks.get(&w).copied().unwrap_or(0)
    }

    /// One balance pass (docs/scheduling.md#the-balance-pass).
    pub(crate) fn balance(&mut self) {
        let mut snapshot = vec![0.0; self.workers.len()];
        for w in self.worker_ids().collect::<Vec<_>>() {
            snapshot[w.idx()] = self.occupancy(w);
        }
        let mut thieves: Vec<WorkerId> = self.idle.iter().collect();
        if thieves.is_empty() || thieves.len() == self.worker_index.len() {
            return;
        }
        let mut victims: Vec<WorkerId> = self.saturated.iter().collect();
        if victims.is_empty() {
            let mut all: Vec<WorkerId> = self.worker_ids().collect();
            all.sort_by(|&a, &b| {
                self.combined_occupancy(b, &snapshot)
                    .total_cmp(&self.combined_occupancy(a, &snapshot))
            });
            all.truncate(10);
            victims = all
                .into_iter()
                .filter(|&w| {
                    self.combined_occupancy(w, &snapshot) > 0.2
                        && self.combined_nprocessing(w) > i64::from(self.worker(w).nthreads)
                        && !thieves.contains(&w)
                })
                .collect();
            if victims.is_empty() {
                return;
            }
        }
        if victims.len() < 20 {
            victims.sort_by(|&a, &b| {
                self.combined_occupancy(b, &snapshot)
                    .total_cmp(&self.combined_occupancy(a, &snapshot))
            });
        }
        for level in 0..LEVELS {
            if thieves.is_empty() {
                break;
            }
            for &victim in &victims {
                if thieves.is_empty() {
                    break;
                }
                let tasks: Vec<TaskId> = match self.stealing.stealable.get(victim.idx()) {
                    Some(Some(bins)) if !bins[level].is_empty() => bins[level].iter().collect(),
                    _ => continue,
                };
                for t in tasks {
                    if thieves.is_empty() {
                        break;
                    }
                    // Stolen or finished since the copy was taken: its bin let it go.
                    let current = self.get_task(t).is_some_and(|x| {
                        x.steal_level as usize == level && x.processing_on() == Some(victim)
                    });
                    if !current {
                        continue;
                    }
                    let Some(thief) = self.get_thief(t, &thieves, &snapshot) else {
                        continue;
                    };
                    let occ_thief = self.combined_occupancy(thief, &snapshot);
                    let occ_victim = self.combined_occupancy(victim, &snapshot);
                    let comm_thief = self.comm_cost(t, thief);
                    let comm_victim = self.comm_cost(t, victim);
                    let compute = self.task_duration(t);
                    if occ_thief + comm_thief + compute
                        <= occ_victim - (comm_victim + compute) / 2.0
                    {
                        self.move_task_request(t, victim, thief);
                        let occ = self.combined_occupancy(thief, &snapshot);
                        let nproc = self.combined_nprocessing(thief).max(0) as usize;
                        if !self.is_unoccupied(thief, occ, nproc) {
                            thieves.retain(|&x| x != thief);
                        }
                    }
                }
                if !thieves.is_empty() {
                    let occ = self.combined_occupancy(victim, &snapshot);
                    self.check_idle_saturated(victim, Some(occ));
                }
            }
        }
    }

    fn get_thief(&self, t: TaskId, thieves: &[WorkerId], snapshot: &[f64]) -> Option<WorkerId> {
        let pool: Vec<WorkerId> = match self.valid_workers(t) {
            None => thieves.to_vec(),
            Some(valid) => {
                let v: Vec<WorkerId> = thieves
                    .iter()
                    .copied()
                    .filter(|w| valid.contains(w))
                    .collect();
                if !v.is_empty() {
                    v
                } else if self.task(t).restrictions().is_some_and(|r| r.loose) {
                    thieves.to_vec()
                } else {
                    return None;
                }
            }
        };
        let actor = self.task(t).is_actor();
        let mut best: Option<((usize, f64, i64), WorkerId)> = None;
        for w in pool {
            let ws = self.worker(w);
            let start = self.combined_occupancy(w, snapshot) / f64::from(ws.nthreads)
                + self.comm_cost(t, w);
            let obj = (if actor { ws.actors.len() } else { 0 }, start, ws.nbytes);
            if best.as_ref().is_none_or(|(b, _)| obj < *b) {
                best = Some((obj, w));
            }
        }
        best.map(|(_, w)| w)
    }

    fn move_task_request(&mut self, t: TaskId, victim: WorkerId, thief: WorkerId) {
        if self.stealing.in_flight.contains_key(&t) {
            return;
        }
        self.stealing.counter += 1;
        let stimulus = self.stealing.counter;
        self.stealing_remove_key(t);
        self.emit(Command::StealRequest {
            worker: victim,
            task: t,
            stimulus,
        });
        let compute = self.task_duration(t);
        let victim_duration = compute + self.comm_cost(t, victim);
        let thief_duration = compute + self.comm_cost(t, thief);
        let st = &mut self.stealing;
        st.in_flight.insert(
            t,
            InFlight {
                victim,
                thief,
                victim_duration,
                thief_duration,
                stimulus,
            },
        );
        *st.in_flight_occupancy.entry(victim).or_insert(0.0) -= victim_duration;
        *st.in_flight_occupancy.entry(thief).or_insert(0.0) += thief_duration;
        *st.in_flight_tasks.entry(victim).or_insert(0) -= 1;
        *st.in_flight_tasks.entry(thief).or_insert(0) += 1;
        st.requests += 1;
    }

    /// `steal-response` from the victim (`move_task_confirm`, docs/scheduling.md#the-steal-protocol). Stale and late
    /// responses are ignored (Ok(false)); Ok(true) means the task moved or was rescheduled.
    pub fn steal_response(
        &mut self,
        victim: WorkerId,
        t: TaskId,
        state: Option<WorkerTaskState>,
        stimulus: u64,
        now: f64,
    ) -> CoreResult<bool> {
        use WorkerTaskState as W;
        if self.get_worker(victim).is_none() {
            return Err(CoreError::UnknownWorker(victim.0));
        }
        if self.get_task(t).is_none() {
            return Ok(false);
        }
        match self.stealing.in_flight.get(&t) {
            Some(d) if d.stimulus == stimulus && d.victim == victim => {}
            _ => return Ok(false),
        }
        if !matches!(
            state,
            None | Some(
                W::Released
                    | W::Ready
                    | W::Constrained
                    | W::Waiting
                    | W::Memory
                    | W::Executing
                    | W::LongRunning
                    | W::Cancelled
                    | W::Resumed
            )
        ) {
            return Err(CoreError::Invalid(format!(
                "steal-response with unexpected worker state {state:?}"
            )));
        }
        Ok(self.stimulus(now, |s, st| {
            (s.steal_response_in(t, state, st), Slots::Unchanged)
        }))
    }

    fn steal_response_in(
        &mut self,
        t: TaskId,
        state: Option<WorkerTaskState>,
        st: &mut Stimulus,
    ) -> bool {
        use WorkerTaskState as W;
        let d = self.remove_from_in_flight(t).expect("checked in flight");
        let (thief, victim) = (d.thief, d.victim);
        let reschedule = |s: &mut Scheduler, st: &mut Stimulus| {
            if s.task(t).state == S::Processing && s.task(t).processing_on() == Some(victim) {
                st.recs.insert(t, S::Released);
                s.settle(st);
            }
        };
        let moved = match state {
            None | Some(W::Released) => {
                reschedule(self, st);
                true
            }
            Some(W::Ready | W::Constrained | W::Waiting) => {
                if !self.is_registered(thief)
                    || self.worker(thief).status != crate::worker::WorkerStatus::Running
                {
                    reschedule(self, st);
                } else if self.task(t).processing_on() == Some(victim) && self.is_registered(victim)
                {
                    self.move_processing(t, victim, thief);
                    self.stealing.moves += 1;
                } else {
                    reschedule(self, st);
                }
                true
            }
            _ => false, // the victim already runs or ran it
        };
        for w in [thief, victim] {
            if self.is_registered(w) {
                self.check_idle_saturated(w, None);
            }
        }
        moved
    }

    /// Moves a processing task from victim to thief and dispatches it there afresh.
    /// (Unlike Dask, reserved resources move with the task.)
    fn move_processing(&mut self, t: TaskId, victim: WorkerId, thief: WorkerId) {
        // Binned again meanwhile if its prefix got measured: out of the victim's bins.
        self.stealing_remove_key(t);
        self.detach_from_worker(t, victim);
        self.attach_to_worker(t, thief);
        self.tm(t).set_processing_on(Some(thief));
        self.put_key_in_stealable(t);
        let run_id = self.next_run_id();
        self.tm(t).run_id = run_id;
        self.emit(Command::ComputeTask {
            worker: thief,
            task: t,
            run_id,
        });
    }

    /// The bins hold exactly the tasks whose `steal_level` is set, each in its
    /// worker's bin of that level, and only processing tasks.
    pub(crate) fn validate_stealing(&self) -> Result<(), String> {
        let mut binned = 0;
        for t in self.task_ids() {
            let ts = self.task(t);
            if ts.steal_level == NOT_BINNED {
                continue;
            }
            binned += 1;
            let in_bin = ts.processing_on().is_some_and(|w| {
                matches!(self.stealing.stealable.get(w.idx()),
                    Some(Some(bins)) if bins.get(ts.steal_level as usize).is_some_and(|b| b.holds(t, ts.bin_place())))
            });
            if ts.state != S::Processing || !in_bin {
                return Err(format!(
                    "{:?} has steal level {} but is {:?}, not in its worker's bin",
                    ts.key(),
                    ts.steal_level,
                    ts.state
                ));
            }
        }
        let mut in_bins = 0;
        for (w, bins) in self.stealing.stealable.iter().enumerate() {
            for (level, bin) in bins.iter().flat_map(|b| b.iter().enumerate()) {
                in_bins += bin.len();
                if let Some(t) = bin.iter().find(|&t| {
                    self.get_task(t).is_none_or(|ts| {
                        ts.steal_level as usize != level
                            || ts.processing_on() != Some(WorkerId(w as u32))
                    })
                }) {
                    let ts = self.task_slot(t);
                    return Err(format!(
                        "bin {level} of worker {w} holds {t:?}, {:?}",
                        ts.map(|ts| (ts.key(), ts.state, ts.steal_level, ts.processing_on()))
                    ));
                }
            }
        }
        if binned != self.stealing.n_binned || in_bins != binned {
            return Err(format!(
                "{binned} tasks binned, count says {}, bins hold {in_bins}",
                self.stealing.n_binned
            ));
        }
        Ok(())
    }

    pub fn stealing_stats(&self) -> &Stealing {
        &self.stealing
    }

    /// Level of a task in the stealing bins, if binned.
    pub fn steal_bin_of(&self, t: TaskId) -> Option<(WorkerId, u8)> {
        let ts = self.get_task(t)?;
        let w = ts.processing_on()?;
        (ts.steal_level != NOT_BINNED).then_some((w, ts.steal_level))
    }
}
