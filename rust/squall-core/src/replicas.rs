//! Replicas on demand (docs/scheduling.md#replicas): `replicate` (each result held by
//! `n` of the chosen workers), `rebalance` (results move from workers above the mean
//! memory to those below, within Dask's tolerances) and the active memory manager's
//! ReduceReplicas pass (surplus copies dropped), once or on every tick.
//!
//! Copies are made as for retirement: `acquire-replicas` to the destination, which
//! fetches from the holder named and announces its copy with `add-replicas`. The copies
//! asked for are kept in `copies` until they arrive; a rebalance move also names the
//! sender, whose copy is dropped (`remove-replicas`) once the recipient's arrives.

use crate::commands::Command;
use crate::error::{CoreError, CoreResult};
use crate::ids::{TaskId, WorkerId};
use crate::key::Key;
use crate::retire::REASK;
use crate::state::Scheduler;
use crate::stimuli::Slots;
use crate::task::TaskState as S;
use crate::worker::WorkerStatus;
use rustc_hash::FxHashSet;
use smallvec::SmallVec;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A copy asked for and not arrived yet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CopyAsked {
    pub dest: WorkerId,
    /// When it was asked for: a `replicate` copy missing after [`REASK`] seconds is
    /// asked for again.
    pub at: f64,
    /// A rebalance move: the sender, whose copy goes once this one arrives.
    pub then_drop: Option<WorkerId>,
}

pub(crate) type CopiesAsked = SmallVec<[CopyAsked; 2]>;

/// How `rebalance` measures a worker's memory (Dask's
/// `distributed.worker.memory.rebalance.measure`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// The bytes of the results it holds, as the scheduler counts them now.
    Managed,
    /// Those bytes plus the unmanaged memory (process minus managed) of its last
    /// heartbeat: what Dask's `process` and `optimistic` approximate.
    Process,
}

/// `rebalance`'s tolerances: fractions of each worker's memory limit (Dask's
/// `distributed.worker.memory.rebalance.*`); a worker without a limit has none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RebalanceSettings {
    pub measure: Measure,
    /// Only workers above this much of their limit send.
    pub sender_min: f64,
    /// Only workers below this much of their limit receive.
    pub recipient_max: f64,
    /// Workers within half this much of their limit around the mean neither send nor
    /// receive.
    pub sender_recipient_gap: f64,
}

impl Default for RebalanceSettings {
    fn default() -> Self {
        RebalanceSettings {
            measure: Measure::Process,
            sender_min: 0.3,
            recipient_max: 0.6,
            sender_recipient_gap: 0.1,
        }
    }
}

/// What `rebalance` started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rebalance {
    /// Moves asked for: (sender, recipient, task).
    pub moves: Vec<(WorkerId, WorkerId, TaskId)>,
    /// Keys asked for that no worker holds: nothing was moved.
    pub missing: Vec<Key>,
}

/// The active memory manager's periodic pass (docs/runtime.md#replicas-and-rebalancing).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AmmTimer {
    pub interval: f64,
    pub last: f64,
}

/// A rebalance sender: bytes to lose at most and at least (negative), rank, worker,
/// the next of its results to look at.
type Sender = (i64, i64, u32, WorkerId, usize);
/// A rebalance recipient: bytes to gain at most and at least (negative), rank, worker.
type Recipient = (i64, i64, u32, WorkerId);

/// Above this many waiters ReduceReplicas keeps one copy per waiter without grouping
/// them by worker (Dask's cut-off for that costly count).
const MANY_WAITERS: usize = 20;

impl Scheduler {
    /// `replicate`, one round: every task in memory gets held by at least `n` (default:
    /// all) of `workers` (default: all; only running ones count). Copies beyond `n` on
    /// those workers are dropped, from the workers holding the most data first (ties:
    /// the last in address order), sparing those where a dependent runs. Missing copies are asked for from the holders, at
    /// most `branching_factor` per holder at a time, each to the worker holding the
    /// least data; one asked for [`REASK`] seconds ago and not arrived is asked for
    /// again. Returns how many copies are still missing: the I/O layer calls again until
    /// none are. Unknown keys, keys not in memory and `n` of 0 are errors.
    pub fn replicate(
        &mut self,
        keys: &[Key],
        n: Option<usize>,
        workers: Option<&[WorkerId]>,
        branching_factor: usize,
        now: f64,
    ) -> CoreResult<usize> {
        let mut tasks = Vec::with_capacity(keys.len());
        let mut absent = Vec::new();
        for k in keys {
            let t = self
                .lookup(k)
                .ok_or_else(|| CoreError::UnknownKey(k.clone()))?;
            if self.task(t).who_has.is_empty() {
                absent.push(k.clone());
            }
            tasks.push(t);
        }
        if !absent.is_empty() {
            return Err(CoreError::Invalid(format!(
                "no worker holds these keys (not computed, lost or erred): {absent:?}"
            )));
        }
        if let Some(&w) = workers
            .unwrap_or(&[])
            .iter()
            .find(|w| self.get_worker(**w).is_none())
        {
            return Err(CoreError::UnknownWorker(w.0));
        }
        if branching_factor == 0 {
            return Err(CoreError::Invalid(
                "branching_factor must be positive".into(),
            ));
        }
        let mut chosen: Vec<WorkerId> = match workers {
            Some(ws) => ws
                .iter()
                .copied()
                .filter(|&w| self.worker(w).status == WorkerStatus::Running)
                .collect(),
            None => self.running.iter().collect(),
        };
        chosen.sort_by_key(|&w| self.rank(w));
        chosen.dedup();
        let n = n.unwrap_or(chosen.len()).min(chosen.len());
        if n == 0 {
            return Err(CoreError::Invalid(
                "cannot use replicate to delete data: no running worker chosen, or n=0".into(),
            ));
        }
        tasks.sort_unstable();
        tasks.dedup();
        Ok(self.stimulus(now, |s, _| {
            let mut added: Vec<i64> = vec![0; s.workers.len()];
            let missing = tasks
                .iter()
                .map(|&t| s.replicate_task(t, n, &chosen, branching_factor, &mut added, now))
                .sum();
            (missing, Slots::Unchanged)
        }))
    }

    /// One task's share of a `replicate` round; returns its copies still missing.
    fn replicate_task(
        &mut self,
        t: TaskId,
        n: usize,
        chosen: &[WorkerId],
        branching_factor: usize,
        added: &mut [i64],
        now: f64,
    ) -> usize {
        let held: Vec<WorkerId> = chosen
            .iter()
            .copied()
            .filter(|&w| self.task(t).who_has.contains(w))
            .collect();
        if held.len() > n {
            let mut droppable: Vec<WorkerId> = held
                .iter()
                .copied()
                .filter(|&w| !self.needed_on(t, w))
                .collect();
            droppable.sort_by_key(|&w| (Reverse(self.worker(w).nbytes), Reverse(self.rank(w))));
            for w in droppable.into_iter().take(held.len() - n) {
                self.drop_copy(t, w);
            }
        }
        let have = chosen
            .iter()
            .filter(|&&w| self.task(t).who_has.contains(w))
            .count();
        let missing = n.saturating_sub(have);
        // Copies asked for recently and still expected count as under way; rebalance
        // moves are left as they are.
        let mut asked = self.copies.remove(&t).unwrap_or_default();
        let who_has = &self.task(t).who_has;
        asked.retain(|c| {
            c.then_drop.is_some()
                || (missing > 0
                    && now - c.at < REASK
                    && chosen.contains(&c.dest)
                    && !who_has.contains(c.dest))
        });
        let pending = asked.iter().filter(|c| c.then_drop.is_none()).count();
        let holders: SmallVec<[WorkerId; 4]> = who_has.iter().collect();
        let room = missing.min(branching_factor * holders.len());
        let mut dests: Vec<WorkerId> = chosen
            .iter()
            .copied()
            .filter(|&w| !who_has.contains(w) && !asked.iter().any(|c| c.dest == w))
            .collect();
        dests.sort_by_key(|&w| (self.worker(w).nbytes + added[w.idx()], self.rank(w)));
        let eff = self.eff_nbytes(t);
        let asking = room.saturating_sub(pending).min(dests.len());
        for (i, &dest) in dests.iter().take(asking).enumerate() {
            let holder = holders[i % holders.len()];
            self.emit(Command::AcquireReplica {
                worker: dest,
                task: t,
                holder,
            });
            added[dest.idx()] += eff;
            asked.push(CopyAsked {
                dest,
                at: now,
                then_drop: None,
            });
        }
        if !asked.is_empty() {
            self.copies.insert(t, asked);
        }
        missing
    }

    /// Whether a task processing on `w` depends on `t`: its copy there is needed.
    fn needed_on(&self, t: TaskId, w: WorkerId) -> bool {
        self.task(t)
            .waiters
            .iter()
            .any(|d| self.task(d).processing_on() == Some(w))
    }

    /// Drops `w`'s copy of `t`, which another worker holds too.
    fn drop_copy(&mut self, t: TaskId, w: WorkerId) {
        debug_assert!(self.task(t).who_has.len() >= 2 && self.task(t).who_has.contains(w));
        self.remove_replica(t, w);
        self.restore_needs(t, w);
        self.emit(Command::RemoveReplicas { worker: w, task: t });
    }

    /// `w` now holds `t` (part of `add-replicas`): a copy asked for arrived; for a
    /// rebalance move, the sender's copy goes.
    pub(crate) fn copy_arrived(&mut self, t: TaskId, w: WorkerId) {
        let Some(asked) = self.copies.get_mut(&t) else {
            return;
        };
        let Some(i) = asked.iter().position(|c| c.dest == w) else {
            return;
        };
        let c = asked.swap_remove(i);
        if asked.is_empty() {
            self.copies.remove(&t);
        }
        if let Some(sender) = c.then_drop {
            let ts = self.task(t);
            if ts.who_has.contains(sender) && ts.who_has.len() >= 2 {
                self.drop_copy(t, sender);
            }
        }
    }

    /// `rebalance`: Dask's plan (docs/scheduling.md#replicas). Among `workers` (default:
    /// all that are not closed), those above the mean memory by more than half the gap
    /// and above `sender_min` send, those below the mean by as much and below
    /// `recipient_max` (and running) receive; the sender and recipient farthest from the
    /// mean are paired for each move, of the sender's earliest held result among `keys`
    /// (default: all) that leaves it at or above the mean, to a recipient not holding
    /// it with room for it. Each move is asked for at once; the sender's copy is dropped
    /// when the recipient's arrives. Keys no worker holds make the whole call a no-op
    /// that names them.
    pub fn rebalance(
        &mut self,
        keys: Option<&[Key]>,
        workers: Option<&[WorkerId]>,
        settings: RebalanceSettings,
        now: f64,
    ) -> CoreResult<Rebalance> {
        if let Some(&w) = workers
            .unwrap_or(&[])
            .iter()
            .find(|w| !self.is_registered(**w))
        {
            return Err(CoreError::UnknownWorker(w.0));
        }
        let allowed: Option<FxHashSet<TaskId>> = match keys {
            None => None,
            Some(keys) => {
                let mut out = Rebalance::default();
                let mut set = FxHashSet::default();
                for k in keys {
                    match self.lookup(k) {
                        Some(t) if !self.task(t).who_has.is_empty() => {
                            set.insert(t);
                        }
                        _ => out.missing.push(k.clone()),
                    }
                }
                if !out.missing.is_empty() {
                    return Ok(out);
                }
                Some(set)
            }
        };
        let mut chosen: Vec<WorkerId> = match workers {
            Some(ws) => ws.to_vec(),
            None => self
                .worker_ids()
                .filter(|&w| self.is_registered(w))
                .collect(),
        };
        chosen.sort_by_key(|&w| self.rank(w));
        chosen.dedup();
        let moves = self.rebalance_moves(allowed.as_ref(), &chosen, settings);
        Ok(self.stimulus(now, |s, _| {
            for &(sender, dest, t) in &moves {
                s.emit(Command::AcquireReplica {
                    worker: dest,
                    task: t,
                    holder: sender,
                });
                s.copies.entry(t).or_default().push(CopyAsked {
                    dest,
                    at: now,
                    then_drop: Some(sender),
                });
            }
            (
                Rebalance {
                    moves,
                    missing: Vec::new(),
                },
                Slots::Unchanged,
            )
        }))
    }

    /// A worker's memory as `rebalance` measures it.
    fn rebalance_memory(&self, w: WorkerId, measure: Measure) -> i64 {
        let ws = self.worker(w);
        match measure {
            Measure::Managed => ws.nbytes,
            Measure::Process => {
                let unmanaged = ws.memory.process.saturating_sub(ws.memory.managed);
                ws.nbytes + i64::try_from(unmanaged).unwrap_or(i64::MAX / 4)
            }
        }
    }

    /// The moves of a rebalance (Dask's `_rebalance_find_msgs`): (sender, recipient,
    /// task).
    fn rebalance_moves(
        &self,
        keys: Option<&FxHashSet<TaskId>>,
        chosen: &[WorkerId],
        settings: RebalanceSettings,
    ) -> Vec<(WorkerId, WorkerId, TaskId)> {
        let mut moves = Vec::new();
        if chosen.is_empty() {
            return moves;
        }
        let memory: Vec<(WorkerId, i64)> = chosen
            .iter()
            .map(|&w| (w, self.rebalance_memory(w, settings.measure)))
            .collect();
        let mean = memory.iter().map(|&(_, m)| m).sum::<i64>() / memory.len() as i64;
        // Min-heaps: the farthest from the mean first.
        let mut senders: BinaryHeap<Reverse<Sender>> = BinaryHeap::new();
        let mut recipients: BinaryHeap<Reverse<Recipient>> = BinaryHeap::new();
        for &(w, mem) in &memory {
            let ws = self.worker(w);
            let (half_gap, sender_min, recipient_max) = if ws.memory_limit > 0 {
                let limit = ws.memory_limit as f64;
                (
                    (settings.sender_recipient_gap / 2.0 * limit) as i64,
                    settings.sender_min * limit,
                    settings.recipient_max * limit,
                )
            } else {
                (0, 0.0, f64::INFINITY)
            };
            let rank = self.rank(w);
            if !ws.has_what.is_empty() && mem >= mean + half_gap && mem as f64 >= sender_min {
                let max = mean - mem;
                senders.push(Reverse((max, max + half_gap, rank, w, 0)));
            } else if mem < mean - half_gap
                && (mem as f64) < recipient_max
                && ws.status == WorkerStatus::Running
            {
                let max = mem - mean;
                recipients.push(Reverse((max, max + half_gap, rank, w)));
            }
        }
        while let Some(&Reverse((mut snd_max, mut snd_min, snd_rank, sender, next))) =
            senders.peek()
        {
            if recipients.is_empty() {
                break;
            }
            let held = &self.worker(sender).has_what;
            let mut moved = None;
            for (i, &t) in held.iter().enumerate().skip(next) {
                let ts = self.task(t);
                if keys.is_some_and(|k| !k.contains(&t))
                    || ts.state != S::Memory
                    || ts.is_actor()
                    || self.copies.contains_key(&t)
                {
                    continue;
                }
                let nbytes = self.eff_nbytes(t);
                if nbytes + snd_max > 0 {
                    continue; // the sender would fall below the mean
                }
                // The recipient farthest from the mean with room that lacks a copy.
                let mut skipped = Vec::new();
                let mut found = None;
                while let Some(Reverse(r)) = recipients.pop() {
                    if nbytes + r.0 > 0 {
                        recipients.push(Reverse(r));
                        break;
                    }
                    if ts.who_has.contains(r.3) {
                        skipped.push(r);
                    } else {
                        found = Some(r);
                        break;
                    }
                }
                recipients.extend(skipped.into_iter().map(Reverse));
                if let Some((mut rec_max, mut rec_min, rec_rank, recipient)) = found {
                    moves.push((sender, recipient, t));
                    snd_max += nbytes;
                    snd_min += nbytes;
                    rec_max += nbytes;
                    rec_min += nbytes;
                    if rec_min < 0 {
                        recipients.push(Reverse((rec_max, rec_min, rec_rank, recipient)));
                    }
                    moved = Some(i + 1);
                    break;
                }
            }
            senders.pop();
            if let Some(next) = moved {
                if snd_min < 0 {
                    senders.push(Reverse((snd_max, snd_min, snd_rank, sender, next)));
                }
            }
        }
        moves
    }

    /// Rebalance moves asked for whose copy has not arrived, between workers both still
    /// there (a move with either gone cannot complete).
    pub fn moves_pending(&self) -> usize {
        self.copies
            .values()
            .flatten()
            .filter(|c| {
                c.then_drop.is_some_and(|sender| self.is_registered(sender))
                    && self.is_registered(c.dest)
            })
            .count()
    }

    /// Forgets the rebalance moves still pending (the I/O layer's wait is over): their
    /// copies, if they arrive, are kept, and so are the senders'. Returns their keys.
    pub fn end_moves(&mut self) -> Vec<Key> {
        let mut keys = Vec::new();
        self.copies.retain(|&t, asked| {
            let before = asked.len();
            asked.retain(|c| c.then_drop.is_none());
            if asked.len() < before {
                keys.push(t);
            }
            !asked.is_empty()
        });
        keys.sort_unstable();
        keys.into_iter()
            .map(|t| self.task(t).key().to_owned())
            .collect()
    }

    /// The active memory manager's ReduceReplicas pass, once: of each result in memory
    /// on several workers, copies beyond one — or beyond one per worker where a
    /// dependent runs or per dependent not yet placed — are dropped, from retiring or
    /// paused workers first, then from those holding the most data, never where a
    /// dependent runs, nor while a copy of it is being made. Returns how many were
    /// dropped.
    pub fn reduce_replicas(&mut self, now: f64) -> usize {
        self.stimulus(now, |s, _| (s.reduce_replicas_in(), Slots::Unchanged))
    }

    pub(crate) fn reduce_replicas_in(&mut self) -> usize {
        if self.replicated_tasks == 0 {
            return 0;
        }
        let mut replicated: Vec<TaskId> = Vec::new();
        for w in self.worker_ids() {
            for &t in &self.worker(w).has_what {
                let ts = self.task(t);
                if ts.who_has.len() >= 2 && ts.who_has.first() == Some(w) {
                    replicated.push(t);
                }
            }
        }
        replicated.sort_unstable();
        let mut memory: Vec<i64> = self
            .workers
            .iter()
            .map(|ws| ws.as_ref().map_or(0, |ws| ws.nbytes))
            .collect();
        let mut dropped = 0;
        for t in replicated {
            let ts = self.task(t);
            if ts.state != S::Memory || ts.is_actor() || self.copies.contains_key(&t) {
                continue;
            }
            let mut keep = ts.waiters.len();
            if 1 < keep && keep < MANY_WAITERS {
                // Waiters on the same worker share its copy; unplaced ones count each.
                let mut places: SmallVec<[Result<WorkerId, TaskId>; 8]> = ts
                    .waiters
                    .iter()
                    .map(|d| self.task(d).processing_on().ok_or(d))
                    .collect();
                places.sort_unstable();
                places.dedup();
                keep = places.len();
            }
            let n_drop = ts.who_has.len().saturating_sub(keep.max(1));
            for _ in 0..n_drop {
                let Some(w) = self.choose_dropper(t, &memory) else {
                    break;
                };
                memory[w.idx()] -= self.eff_nbytes(t);
                self.drop_copy(t, w);
                dropped += 1;
            }
        }
        dropped
    }

    /// Which holder of `t` drops its copy (Dask's `_find_dropper`): none where a
    /// dependent runs; non-running workers first, then the most loaded (ties: the last
    /// in address order). The last running holder keeps its copy when the others are
    /// non-running workers where a dependent runs (they would otherwise copy it back and
    /// forth with retirement).
    fn choose_dropper(&self, t: TaskId, memory: &[i64]) -> Option<WorkerId> {
        let ts = self.task(t);
        if ts.who_has.len() < 2 {
            return None;
        }
        let (busy, free): (SmallVec<[WorkerId; 4]>, SmallVec<[WorkerId; 4]>) =
            ts.who_has.iter().partition(|&w| self.needed_on(t, w));
        let running = |w: WorkerId| self.worker(w).status == WorkerStatus::Running;
        let choice = free
            .iter()
            .copied()
            .max_by_key(|&w| (!running(w), memory[w.idx()], self.rank(w)))?;
        if free.len() == 1
            && running(choice)
            && !busy.is_empty()
            && busy.iter().all(|&w| !running(w))
        {
            return None;
        }
        Some(choice)
    }

    /// Starts the active memory manager's periodic ReduceReplicas pass, every
    /// `interval` seconds of `tick`s (the first at the next tick).
    pub fn amm_start(&mut self, interval: f64) -> CoreResult<()> {
        if interval.is_nan() || interval <= 0.0 {
            return Err(CoreError::Invalid(format!(
                "the active memory manager's interval must be positive, not {interval}"
            )));
        }
        if self.amm.is_none() {
            self.amm = Some(AmmTimer {
                interval,
                last: f64::NEG_INFINITY,
            });
        }
        Ok(())
    }

    pub fn amm_stop(&mut self) {
        self.amm = None;
    }

    pub fn amm_running(&self) -> bool {
        self.amm.is_some()
    }

    /// Part of `tick`: the periodic pass, when due.
    pub(crate) fn amm_tick(&mut self, now: f64) {
        if let Some(timer) = &mut self.amm {
            if now - timer.last >= timer.interval - 1e-9 {
                timer.last = now;
                self.reduce_replicas_in();
            }
        }
    }
}
