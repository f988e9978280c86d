//! What clients submit: tasks with their simulated cost, grouped in submissions.

use rustc_hash::FxHashMap;
use squall_core::{DepRef, GraphOrder, Key, KeyRef, TaskOptions};

/// One task of a simulated graph.
#[derive(Clone, Debug, PartialEq)]
pub struct SimTask {
    pub key: Key,
    /// Tasks of the same graph (by index) or keys of earlier submissions.
    pub deps: Vec<DepRef>,
    /// Seconds of compute on one thread.
    pub duration: f64,
    /// Size of the result, bytes: held in worker memory and moved by transfers.
    pub nbytes: u64,
    /// Priority, restrictions, retries, … as annotations.
    pub options: Option<TaskOptions>,
    /// I/O or array-creation task (root-ish whatever its group size).
    pub data_producer: bool,
}

impl SimTask {
    pub fn new(key: Key, deps: Vec<DepRef>, duration: f64, nbytes: u64) -> Self {
        SimTask {
            key,
            deps,
            duration,
            nbytes,
            options: None,
            data_producer: false,
        }
    }
}

/// A task graph; dependencies point at earlier or later tasks by index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimGraph {
    pub tasks: Vec<SimTask>,
}

impl SimGraph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a task depending on tasks of this graph; returns its index.
    pub fn add(&mut self, key: Key, deps: &[usize], duration: f64, nbytes: u64) -> usize {
        let deps = deps.iter().map(|&d| DepRef::Local(d as u32)).collect();
        self.tasks.push(SimTask::new(key, deps, duration, nbytes));
        self.tasks.len() - 1
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Tasks no other task of this graph depends on (what `compute()` asks for).
    pub fn sinks(&self) -> Vec<usize> {
        let mut has_dependent = vec![false; self.tasks.len()];
        for t in &self.tasks {
            for d in &t.deps {
                if let DepRef::Local(i) = d {
                    if let Some(flag) = has_dependent.get_mut(*i as usize) {
                        *flag = true;
                    }
                }
            }
        }
        (0..self.tasks.len())
            .filter(|&i| !has_dependent[i])
            .collect()
    }
}

/// A graph sent by a client at a given time (Dask's `update-graph`).
#[derive(Clone, Debug)]
pub struct SimSubmission {
    /// Virtual time of arrival at the scheduler, seconds.
    pub time: f64,
    pub client: String,
    pub graph: SimGraph,
    /// Indices of the tasks the client holds futures on.
    pub wanted: Vec<usize>,
    /// Per-call options (`priority=`, `workers=`, `resources=` …).
    pub defaults: TaskOptions,
    /// Submissions closer together than this share a FIFO generation.
    pub fifo_timeout: f64,
    pub order: GraphOrder,
}

impl SimSubmission {
    /// `client.compute(graph)` at `time`: wants the sinks, 60 s FIFO window, dask.order.
    pub fn compute(graph: SimGraph, time: f64) -> Self {
        SimSubmission {
            time,
            client: "client".into(),
            wanted: graph.sinks(),
            graph,
            defaults: TaskOptions::default(),
            fifo_timeout: 60.0,
            order: GraphOrder::Compute,
        }
    }

    /// `client.map`-like: 100 ms FIFO window and tasks ordered by index.
    pub fn map(graph: SimGraph, time: f64) -> Self {
        SimSubmission {
            fifo_timeout: 0.1,
            order: GraphOrder::Sequential,
            ..Self::compute(graph, time)
        }
    }

    /// The same submission with a user priority (`priority=` keyword).
    pub fn with_priority(mut self, priority: i64) -> Self {
        self.defaults.priority = Some(priority);
        self
    }

    pub fn with_client(mut self, client: &str) -> Self {
        self.client = client.into();
        self
    }
}

/// What the simulation knows about every task ever submitted, by sim index.
#[derive(Default)]
pub(crate) struct TaskTable {
    pub keys: Vec<Key>,
    pub names: Vec<String>,
    pub duration: Vec<f64>,
    pub nbytes: Vec<u64>,
    /// Lookups only: never iterated, so hash order cannot leak into results.
    index: FxHashMap<Key, usize>,
}

impl TaskTable {
    pub fn insert(&mut self, t: &SimTask) -> Result<usize, String> {
        if self.index.contains_key(&t.key) {
            return Err(format!("key {} submitted twice", t.key.python_str()));
        }
        let i = self.keys.len();
        self.index.insert(t.key.clone(), i);
        self.keys.push(t.key.clone());
        self.names.push(t.key.python_str().into_owned());
        self.duration.push(t.duration);
        self.nbytes.push(t.nbytes);
        Ok(i)
    }

    pub fn get(&self, key: &KeyRef) -> Option<usize> {
        self.index.get(key).copied()
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }
}
