//! Per-task scheduler state (docs/scheduling.md#tasks).

use crate::ids::{GroupId, TaskId, WorkerId};
use crate::idset::IdSet;
use crate::key::{get_varint, put_varint, varint_len, KeyRef};
use crate::links::{Holders, Wanters};
use squall_priority::Priority;
use std::sync::Arc;

/// The 8 scheduler task states (docs/scheduling.md#task-states).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum TaskState {
    Released,
    Waiting,
    Queued,
    NoWorker,
    Processing,
    Memory,
    Erred,
    Forgotten,
}

impl TaskState {
    pub const ALL: [TaskState; 8] = [
        TaskState::Released,
        TaskState::Waiting,
        TaskState::Queued,
        TaskState::NoWorker,
        TaskState::Processing,
        TaskState::Memory,
        TaskState::Erred,
        TaskState::Forgotten,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TaskState::Released => "released",
            TaskState::Waiting => "waiting",
            TaskState::Queued => "queued",
            TaskState::NoWorker => "no-worker",
            TaskState::Processing => "processing",
            TaskState::Memory => "memory",
            TaskState::Erred => "erred",
            TaskState::Forgotten => "forgotten",
        }
    }

    /// States in which a dependent counts as a waiter of its dependencies.
    pub fn is_waiter_state(self) -> bool {
        matches!(
            self,
            TaskState::Waiting | TaskState::Queued | TaskState::Processing | TaskState::NoWorker
        )
    }
}

/// An opaque run specification: the scheduler never looks inside (save the blob
/// references of docs/protocol.md#run-specs). Owned by its task alone: a map's tasks
/// hold millions, and a box is 16 bytes a task less than shared bytes (no counts).
pub type RunSpec = Box<[u8]>;

/// Hard (or, with `loose`, preferred) placement constraints.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Restrictions {
    /// Worker addresses or names.
    pub workers: Vec<String>,
    pub hosts: Vec<String>,
    /// (resource name, amount needed)
    pub resources: Vec<(String, f64)>,
    pub loose: bool,
}

impl Restrictions {
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty() && self.hosts.is_empty() && self.resources.is_empty()
    }
}

/// Who produced an error: a worker (opaque payloads) or the scheduler itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ErrorKind {
    #[default]
    Remote,
    /// The task was processing on `allowed_failures + 1` workers that died.
    KilledWorker,
    /// The task's inputs exceed the chosen worker's memory limit.
    MemoryError,
    /// No worker at all for longer than `no-workers-timeout`.
    NoWorker,
    /// No worker satisfies the task's restrictions for longer than the timeout.
    NoValidWorker,
    /// The worker holding an actor was lost.
    ActorLost,
}

/// An error: opaque pickled payloads (from a worker) plus texts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorInfo {
    pub kind: ErrorKind,
    pub exception: Arc<[u8]>,
    pub traceback: Arc<[u8]>,
    pub exception_text: String,
    pub traceback_text: String,
}

/// Rarely-set task fields, boxed so the common task stays small.
#[derive(Clone, Debug, Default)]
pub struct TaskExtra {
    pub restrictions: Option<Restrictions>,
    pub retries: u32,
    /// The failure this task carries (its own, or its blamed ancestor's).
    pub error: Option<Arc<ErrorInfo>>,
    /// The task whose failure this task inherits.
    pub exception_blame: Option<TaskId>,
    pub erred_on: Vec<WorkerId>,
    pub actor: bool,
    /// False makes a root-ish task bypass queuing.
    pub unqueueable: bool,
    /// Opaque annotations, echoed in compute-task messages.
    pub annotations: Option<Arc<[u8]>>,
}

pub(crate) const F_HAS_LOST_DEPS: u8 = 1;
pub(crate) const F_DATA_PRODUCER: u8 = 2;
pub(crate) const F_HAS_PRIORITY: u8 = 4;
pub(crate) const F_LONG_RUNNING: u8 = 8;
/// It has a run spec (the bytes of `Task::text` after its key).
const F_HAS_SPEC: u8 = 16;

/// `Task::steal_level` of a task in no stealing bin.
pub(crate) const NOT_BINNED: u8 = u8::MAX;

/// `Task::processing_on` of a task assigned to no worker (worker ids never reach it).
const NOT_PROCESSING: u32 = u32::MAX;

/// A task's text: its key's encoding, then its run spec's bytes if it has one, behind
/// the key's length as a LEB128 varint. Made in one allocation when the task arrives
/// and moved into its record as it is (docs/core.md#memory-per-task). (`Default` is an
/// empty placeholder left behind when a text is moved out, as for [`Key`]; it is never
/// stored.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskText {
    bytes: Box<[u8]>,
    has_spec: bool,
}

impl TaskText {
    /// Copies `key` and `spec` into one allocation, behind the key's length.
    pub fn new(key: &KeyRef, spec: Option<&[u8]>) -> TaskText {
        let key = key.as_bytes();
        let has_spec = spec.is_some();
        let spec = spec.unwrap_or_default();
        let mut bytes = Vec::with_capacity(varint_len(key.len() as u64) + key.len() + spec.len());
        put_varint(&mut bytes, key.len() as u64);
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(spec);
        TaskText {
            bytes: bytes.into_boxed_slice(),
            has_spec,
        }
    }

    #[inline]
    pub fn key(&self) -> &KeyRef {
        key_of(&self.bytes)
    }

    #[inline]
    pub fn run_spec(&self) -> Option<&[u8]> {
        self.has_spec.then(|| spec_of(&self.bytes))
    }
}

/// Where the key lies in a task's text: after its length's varint. Reading the length
/// costs a byte or two, where finding a key's extent from its own encoding walked
/// every element of a tuple key (docs/core.md#key-and-spec).
#[inline]
fn key_range(text: &[u8]) -> std::ops::Range<usize> {
    let mut at = 0;
    let len = get_varint(text, &mut at).expect("a task's text starts with its key's length");
    at..at + len as usize
}

#[inline]
fn key_of(text: &[u8]) -> &KeyRef {
    KeyRef::of_encoded(&text[key_range(text)])
}

#[inline]
fn spec_of(text: &[u8]) -> &[u8] {
    &text[key_range(text).end..]
}

pub struct Task {
    /// Its key's encoding, then its run spec's bytes: one allocation for both (a
    /// key's encoding delimits itself), see docs/core.md#memory-per-task.
    text: Box<[u8]>,
    pub priority: Priority,
    pub dependencies: IdSet<TaskId>,
    pub dependents: IdSet<TaskId>,
    /// Dependents that still need this task's data.
    pub waiters: IdSet<TaskId>,
    pub who_has: Holders,
    pub who_wants: Wanters,
    /// Result size in bytes, −1 while unknown.
    pub nbytes: i64,
    /// The current run: fresh for every compute-task, so a worker's report of an
    /// earlier run is recognised as stale.
    pub run_id: u64,
    /// While queued or no-worker, its place in line (ties of equal priority go first
    /// come, first served); not the run id: a run is a dispatch to a worker and a place
    /// in line is not, and sharing one counter tied the two together (docs/core.md).
    /// While processing, its places in its worker's processing list (low half) and
    /// stealing bin (high half): one word for both, as a task in line is never on a
    /// worker (docs/core.md#task-lists).
    place: u64,
    pub extra: Option<Box<TaskExtra>>,
    pub group: GroupId,
    /// The worker it is assigned to, `NOT_PROCESSING` if none (a bare u32 keeps the
    /// task 8 bytes smaller than `Option<WorkerId>` would): see `processing_on()`.
    processing_on: u32,
    /// Number of dependencies not yet in memory (Dask's `waiting_on` set, counted).
    pub waiting_on: u32,
    pub state: TaskState,
    /// Worker deaths while this task was processing.
    pub suspicious: u8,
    pub(crate) flags: u8,
    /// Its level in its worker's stealing bins, `NOT_BINNED` if in none: kept here
    /// rather than in a scheduler-wide map (docs/scheduling.md#work-stealing).
    pub(crate) steal_level: u8,
}

impl Task {
    /// The worker it is assigned to; set exactly in state processing.
    #[inline]
    pub fn processing_on(&self) -> Option<WorkerId> {
        (self.processing_on != NOT_PROCESSING).then_some(WorkerId(self.processing_on))
    }

    #[inline]
    pub(crate) fn set_processing_on(&mut self, w: Option<WorkerId>) {
        self.processing_on = w.map_or(NOT_PROCESSING, |w| w.0);
    }

    /// Its place in line; meaningful while queued or no-worker.
    #[inline]
    pub fn queue_seq(&self) -> u64 {
        self.place
    }

    #[inline]
    pub(crate) fn set_queue_seq(&mut self, seq: u64) {
        self.place = seq;
    }

    /// Its place in its worker's processing list; meaningful while processing.
    #[inline]
    pub(crate) fn processing_place(&self) -> u32 {
        self.place as u32
    }

    #[inline]
    pub(crate) fn set_processing_place(&mut self, place: u32) {
        self.place = (self.place & !u64::from(u32::MAX)) | u64::from(place);
    }

    /// Its place in its stealing bin; meaningful while binned.
    #[inline]
    pub(crate) fn bin_place(&self) -> u32 {
        (self.place >> 32) as u32
    }

    #[inline]
    pub(crate) fn set_bin_place(&mut self, place: u32) {
        self.place = (self.place & u64::from(u32::MAX)) | (u64::from(place) << 32);
    }

    pub(crate) fn new(text: TaskText, group: GroupId) -> Task {
        Task {
            flags: if text.has_spec { F_HAS_SPEC } else { 0 },
            text: text.bytes,
            priority: Priority::default(),
            dependencies: IdSet::new(),
            dependents: IdSet::new(),
            waiters: IdSet::new(),
            who_has: Holders::default(),
            who_wants: Wanters::default(),
            nbytes: -1,
            run_id: 0,
            place: 0,
            extra: None,
            group,
            processing_on: NOT_PROCESSING,
            waiting_on: 0,
            state: TaskState::Released,
            suspicious: 0,
            steal_level: NOT_BINNED,
        }
    }

    /// Its key.
    #[inline]
    pub fn key(&self) -> &KeyRef {
        key_of(&self.text)
    }

    /// Whether it has a run spec: the record's flag, without reading its text (another
    /// allocation, and a cache miss when the record was the only thing touched).
    #[inline]
    pub fn has_run_spec(&self) -> bool {
        self.flag(F_HAS_SPEC)
    }

    /// Its run spec; None for pure data (scattered), which cannot be recomputed.
    pub fn run_spec(&self) -> Option<&[u8]> {
        self.flag(F_HAS_SPEC).then(|| spec_of(&self.text))
    }

    /// Its run spec, to rewrite in place.
    pub(crate) fn run_spec_mut(&mut self) -> Option<&mut [u8]> {
        let at = key_range(&self.text).end;
        self.flag(F_HAS_SPEC).then(|| &mut self.text[at..])
    }

    pub(crate) fn set_run_spec(&mut self, spec: Option<&[u8]>) {
        self.text = TaskText::new(self.key(), spec).bytes;
        self.set_flag(F_HAS_SPEC, spec.is_some());
    }

    #[inline]
    pub(crate) fn flag(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    #[inline]
    pub(crate) fn set_flag(&mut self, f: u8, on: bool) {
        if on {
            self.flags |= f;
        } else {
            self.flags &= !f;
        }
    }

    pub fn has_lost_dependencies(&self) -> bool {
        self.flag(F_HAS_LOST_DEPS)
    }

    pub fn is_long_running(&self) -> bool {
        self.flag(F_LONG_RUNNING)
    }

    pub fn is_data_producer(&self) -> bool {
        self.flag(F_DATA_PRODUCER)
    }

    pub fn extra_mut(&mut self) -> &mut TaskExtra {
        self.extra.get_or_insert_with(Default::default)
    }

    pub fn restrictions(&self) -> Option<&Restrictions> {
        self.extra.as_ref()?.restrictions.as_ref()
    }

    pub fn has_restrictions(&self) -> bool {
        self.restrictions().is_some_and(|r| !r.is_empty())
    }

    pub fn exception_blame(&self) -> Option<TaskId> {
        self.extra.as_ref()?.exception_blame
    }

    pub fn retries(&self) -> u32 {
        self.extra.as_ref().map_or(0, |e| e.retries)
    }

    pub fn is_actor(&self) -> bool {
        self.extra.as_ref().is_some_and(|e| e.actor)
    }

    pub fn queueable(&self) -> bool {
        !self.extra.as_ref().is_some_and(|e| e.unqueueable)
    }

    pub fn error(&self) -> Option<&Arc<ErrorInfo>> {
        self.extra.as_ref()?.error.as_ref()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn task_stays_compact() {
        // Budget: ≤ 300 bytes per live task including key, table and arena overhead
        // (docs/core.md#memory-per-task).
        let size = std::mem::size_of::<super::Task>();
        assert!(size <= 136, "Task grew to {size} bytes");
    }

    #[test]
    fn a_text_gives_back_its_key_and_spec_at_every_length_prefix() {
        use super::{Task, TaskText};
        use crate::ids::GroupId;
        use crate::key::Key;
        // Names of 118 to 132 bytes put the encodings either side of 128 bytes, where
        // the length takes a second byte; 20,000 takes three.
        let names = (118..=132).chain([0, 20_000]).map(|n| "k".repeat(n));
        let keys = names.flat_map(|n| [Key::str(&n), Key::tuple_str_ints(&n, &[3, -1])]);
        for key in keys {
            for spec in [None, Some(&b""[..]), Some(&b"spec bytes"[..])] {
                let text = TaskText::new(&key, spec);
                assert_eq!((text.key(), text.run_spec()), (&*key, spec));
                let task = Task::new(text, GroupId(0));
                assert_eq!((task.key(), task.run_spec()), (&*key, spec));
            }
        }
    }
}
