//! The client's table of futures' states by key (docs/runtime.md#the-table-of-states):
//! a dict for any key, and the keys of a `map` chunk as one run, its states in a vector
//! indexed by the key's last eight hex digits. A run's keys are neither hashed nor
//! entered in a hash table: one word per key, and a lookup is a split and a subtraction.
//!
//! Where a key lives is a function of the key and the runs present, never of how it was
//! entered: a str key whose head (all but its last eight characters, lowercase hex
//! digits) has a run covering its index is in that run, any other key in the dict. A run
//! is made only for a head with no key in the dict, and goes once its last state does.

use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};
use rustc_hash::FxHashMap;

/// Hex digits at the end of a run's key: its index, as `f"{head}{i:08x}"` writes it.
const INDEX_DIGITS: usize = 8;

/// `key` as its head and the index its last eight characters spell in lowercase hex,
/// or None if they do not (or nothing is left before them).
pub fn split_key(key: &str) -> Option<(&str, u32)> {
    let at = key.len().checked_sub(INDEX_DIGITS).filter(|&at| at > 0)?;
    let mut index = 0u32;
    for &c in &key.as_bytes()[at..] {
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        index = index << 4 | u32::from(digit);
    }
    // The last eight bytes are ASCII, so `at` is a character boundary.
    Some((&key[..at], index))
}

/// The key of index `i` of the run `head`.
fn run_key(head: &str, i: u32) -> String {
    format!("{head}{i:08x}")
}

/// The states of one run of keys, `head` followed by `start`, `start + 1`, ...
struct Run {
    start: u32,
    states: Vec<Option<Py<PyAny>>>,
    live: usize,
}

/// Where a key is held, if anywhere.
pub enum Held<'py> {
    /// The state held for it.
    State(Bound<'py, PyAny>),
    Absent,
}

/// `ClientConnection.futures`: the state of every key the client holds futures for, a
/// mapping like a dict of them (docs/runtime.md#the-table-of-states).
#[pyclass(module = "squall._core", mapping)]
pub struct FutureTable {
    /// Every key not in a run.
    dict: Py<PyDict>,
    /// How many str keys in `dict` split into a head and an index: while there are
    /// none, a new run need not look for its keys there.
    dict_splittable: usize,
    runs: FxHashMap<Box<str>, Run>,
    /// States held in runs, over all of them.
    in_runs: usize,
}

/// `key`'s text if it is a str (a run holds only str keys).
fn text_of<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<Option<&'a str>> {
    key.cast::<PyString>().ok().map(|s| s.to_str()).transpose()
}

impl FutureTable {
    /// The run covering the str key `key` and the key's place in it, if any.
    fn run_of(&mut self, key: &str) -> Option<(&mut Run, usize)> {
        let (head, index) = split_key(key)?;
        let run = self.runs.get_mut(head)?;
        let at = index.checked_sub(run.start)? as usize;
        (at < run.states.len()).then_some((run, at))
    }

    /// What a run holds for the str key `key`: None if no run covers it (the dict may
    /// hold it then).
    fn held_in_run<'py>(&mut self, py: Python<'py>, key: &str) -> Option<Held<'py>> {
        let (run, at) = self.run_of(key)?;
        Some(
            run.states[at]
                .as_ref()
                .map_or(Held::Absent, |st| Held::State(st.bind(py).clone())),
        )
    }

    /// The state held for the str key `key`, given as text (a key read off the wire):
    /// no Python string is made unless the dict must be looked in.
    pub fn get_str<'py>(&mut self, py: Python<'py>, key: &str) -> PyResult<Held<'py>> {
        if let Some(held) = self.held_in_run(py, key) {
            return Ok(held);
        }
        if self.dict.bind(py).is_empty() {
            return Ok(Held::Absent);
        }
        self.get_in_dict(&PyString::new(py, key).into_any())
    }

    fn get_in_dict<'py>(&self, key: &Bound<'py, PyAny>) -> PyResult<Held<'py>> {
        Ok(match self.dict.bind(key.py()).get_item(key)? {
            Some(st) => Held::State(st),
            None => Held::Absent,
        })
    }

    /// The state held for `key`.
    pub fn get<'py>(&mut self, key: &Bound<'py, PyAny>) -> PyResult<Held<'py>> {
        if let Some(held) = text_of(key)?.and_then(|s| self.held_in_run(key.py(), s)) {
            return Ok(held);
        }
        self.get_in_dict(key)
    }

    /// Holds `state` for `key` (replacing the state held, if any).
    pub fn insert(&mut self, key: &Bound<'_, PyAny>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let text = text_of(key)?;
        if let Some((run, at)) = text.and_then(|s| self.run_of(s)) {
            if run.states[at].replace(state.clone().unbind()).is_none() {
                run.live += 1;
                self.in_runs += 1;
            }
            return Ok(());
        }
        let dict = self.dict.bind(key.py());
        let before = dict.len();
        dict.set_item(key, state)?;
        if dict.len() > before && text.and_then(split_key).is_some() {
            self.dict_splittable += 1;
        }
        Ok(())
    }

    /// Takes `key` out (if `only` is given, only if `only` is its state): its state, if
    /// it was held.
    pub fn remove<'py>(
        &mut self,
        key: &Bound<'py, PyAny>,
        only: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Held<'py>> {
        let py = key.py();
        let text = text_of(key)?;
        if let Some((run, at)) = text.and_then(|s| self.run_of(s)) {
            let Some(held) = run.states[at].as_ref().map(|st| st.bind(py).clone()) else {
                return Ok(Held::Absent);
            };
            if only.is_some_and(|only| !only.is(&held)) {
                return Ok(Held::State(held));
            }
            run.states[at] = None;
            run.live -= 1;
            let emptied = run.live == 0;
            self.in_runs -= 1;
            if emptied {
                let (head, _) = text.and_then(split_key).expect("a run's key splits");
                self.runs.remove(head);
            }
            return Ok(Held::State(held));
        }
        let dict = self.dict.bind(py);
        let Some(held) = dict.get_item(key)? else {
            return Ok(Held::Absent);
        };
        if only.is_none_or(|only| only.is(&held)) {
            dict.del_item(key)?;
            if text.and_then(split_key).is_some() {
                self.dict_splittable -= 1;
            }
        }
        Ok(Held::State(held))
    }

    /// Holds a new state (made by `new_state`) for each of the keys `head` + `start`,
    /// `start + 1`, ... as one run, if it can be made: no run of `head` yet, none of
    /// the keys in the dict, and every index below 2**32. False (nothing done) otherwise.
    pub fn hold_run(
        &mut self,
        py: Python<'_>,
        head: &str,
        start: u64,
        keys: &[Bound<'_, PyAny>],
        new_state: &mut dyn FnMut() -> PyResult<Py<PyAny>>,
    ) -> PyResult<bool> {
        let fits = |n: u64| u32::try_from(n).is_ok();
        if self.runs.contains_key(head) || !fits(start + keys.len() as u64) {
            return Ok(false);
        }
        let start = start as u32;
        let dict = self.dict.bind(py);
        let mut held = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter().enumerate() {
            let Ok(text) = key.cast::<PyString>() else {
                return Ok(false);
            };
            if split_key(text.to_str()?) != Some((head, start + i as u32)) {
                return Err(PyValueError::new_err(format!(
                    "key {i} of the run {head:?} from {start} is {key}, not {}",
                    run_key(head, start + i as u32)
                )));
            }
            if self.dict_splittable > 0 && dict.contains(key)? {
                return Ok(false);
            }
        }
        for _ in keys {
            held.push(Some(new_state()?));
        }
        self.in_runs += held.len();
        if !held.is_empty() {
            let live = held.len();
            let run = Run {
                start,
                states: held,
                live,
            };
            self.runs.insert(head.into(), run);
        }
        Ok(true)
    }

    fn len(&self, py: Python<'_>) -> usize {
        self.dict.bind(py).len() + self.in_runs
    }
}

#[pymethods]
impl FutureTable {
    #[new]
    fn new(py: Python<'_>) -> Self {
        Self {
            dict: PyDict::new(py).unbind(),
            dict_splittable: 0,
            runs: FxHashMap::default(),
            in_runs: 0,
        }
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.len(py)
    }

    fn __contains__(&mut self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(matches!(self.get(key)?, Held::State(_)))
    }

    fn __getitem__<'py>(&mut self, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match self.get(key)? {
            Held::State(st) => Ok(st),
            Held::Absent => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    fn __setitem__(&mut self, key: &Bound<'_, PyAny>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        self.insert(key, state)
    }

    /// `dict.get`.
    #[pyo3(name = "get", signature = (key, default = None))]
    fn get_state<'py>(
        &mut self,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(match self.get(key)? {
            Held::State(st) => Some(st),
            Held::Absent => default,
        })
    }

    /// `dict.pop`: a KeyError for a key not held unless a default is given.
    #[pyo3(signature = (key, *default))]
    fn pop<'py>(
        &mut self,
        key: &Bound<'py, PyAny>,
        default: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.remove(key, None)? {
            Held::State(st) => Ok(st),
            Held::Absent if !default.is_empty() => default.get_item(0),
            Held::Absent => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    fn clear(&mut self, py: Python<'_>) {
        self.dict.bind(py).clear();
        self.dict_splittable = 0;
        self.runs.clear();
        self.in_runs = 0;
    }

    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut out: Vec<Bound<'py, PyAny>> = self.dict.bind(py).values().iter().collect();
        for run in self.runs.values() {
            out.extend(run.states.iter().flatten().map(|st| st.bind(py).clone()));
        }
        PyList::new(py, out)
    }

    /// `(key, state)` of every key held: the dict's, then each run's (a run's keys are
    /// written anew).
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut out: Vec<Bound<'py, PyTuple>> = Vec::with_capacity(self.len(py));
        for (k, v) in self.dict.bind(py).iter() {
            out.push(PyTuple::new(py, [k, v])?);
        }
        for (head, run) in &self.runs {
            for (at, st) in run.states.iter().enumerate() {
                if let Some(st) = st {
                    let key = PyString::new(py, &run_key(head, run.start + at as u32));
                    out.push(PyTuple::new(py, [key.into_any(), st.bind(py).clone()])?);
                }
            }
        }
        PyList::new(py, out)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.dict)?;
        for run in self.runs.values() {
            for st in run.states.iter().flatten() {
                visit.call(st)?;
            }
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.runs.clear();
        self.in_runs = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::split_key;

    #[test]
    fn a_key_splits_at_its_last_eight_hex_digits() {
        assert_eq!(split_key("inc-abc0000000a"), Some(("inc-abc", 10)));
        assert_eq!(split_key("xffffffff"), Some(("x", u32::MAX)));
        assert_eq!(split_key("0000000a"), None, "nothing before the index");
        assert_eq!(
            split_key("inc-0000000A"),
            None,
            "uppercase is not the index"
        );
        assert_eq!(split_key("inc-000000g1"), None);
        assert_eq!(split_key("é0000000a"), Some(("é", 10)));
    }
}
