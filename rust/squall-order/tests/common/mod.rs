//! Helpers to write graphs by key name and inspect the resulting order.
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::HashMap;

use squall_order::{order, Node, OrderError};

/// Python's `str` of a tuple key, e.g. `('a', 1, 0)`.
pub fn key(name: &str, idx: &[i64]) -> String {
    let mut s = format!("('{name}'");
    for i in idx {
        s.push_str(&format!(", {i}"));
    }
    if idx.is_empty() {
        s.push(',');
    }
    s.push(')');
    s
}

/// Short form of [`key`] for one index.
pub fn k1(name: &str, i: i64) -> String {
    key(name, &[i])
}

/// A task graph addressed by key name, like a dask dict.
#[derive(Default, Clone)]
pub struct Dsk {
    names: Vec<String>,
    is_task: Vec<bool>,
    deps: Vec<Vec<String>>,
    index: HashMap<String, usize>,
}

impl Dsk {
    pub fn new() -> Self {
        Self::default()
    }

    fn add<S: AsRef<str>>(&mut self, name: impl Into<String>, is_task: bool, deps: &[S]) {
        let name = name.into();
        let deps = deps.iter().map(|d| d.as_ref().to_owned()).collect();
        match self.index.get(&name) {
            Some(&i) => {
                self.is_task[i] = is_task;
                self.deps[i] = deps;
            }
            None => {
                self.index.insert(name.clone(), self.names.len());
                self.names.push(name);
                self.is_task.push(is_task);
                self.deps.push(deps);
            }
        }
    }

    /// A runnable task; dependencies may be declared later.
    pub fn task<S: AsRef<str>>(&mut self, name: impl Into<String>, deps: &[S]) {
        self.add(name, true, deps);
    }

    /// Parses one node per line: `[=]key [<- key, key, ...]`, where a key is a
    /// name optionally followed by integer indices (`rechunk-split 12` stands
    /// for `('rechunk-split', 12)`) and `=` marks a non-task node. `rename`
    /// maps each key's name part.
    pub fn from_spec_renamed(spec: &str, rename: impl Fn(&str) -> String) -> Self {
        let parse_key = |text: &str| {
            let mut parts = text.split_whitespace();
            let name = rename(parts.next().expect("a key has a name"));
            let idx: Vec<i64> = parts
                .map(|p| p.parse().expect("indices are integers"))
                .collect();
            if idx.is_empty() {
                name
            } else {
                key(&name, &idx)
            }
        };
        let mut g = Dsk::new();
        for line in spec
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (node, deps) = line.split_once(" <- ").unwrap_or((line, ""));
            let (is_task, node) = match node.strip_prefix('=') {
                Some(rest) => (false, rest),
                None => (true, node),
            };
            let deps: Vec<String> = deps
                .split(',')
                .filter(|d| !d.trim().is_empty())
                .map(parse_key)
                .collect();
            g.add(parse_key(node), is_task, &deps);
        }
        g
    }

    pub fn from_spec(spec: &str) -> Self {
        Self::from_spec_renamed(spec, str::to_owned)
    }

    /// A task without dependencies.
    pub fn root(&mut self, name: impl Into<String>) {
        self.add::<&str>(name, true, &[]);
    }

    /// A data value without dependencies.
    pub fn value(&mut self, name: impl Into<String>) {
        self.add::<&str>(name, false, &[]);
    }

    /// A pure data / alias / list node.
    pub fn data<S: AsRef<str>>(&mut self, name: impl Into<String>, deps: &[S]) {
        self.add(name, false, deps);
    }

    pub fn remove(&mut self, name: &str) {
        let i = self.index.remove(name).expect("known key");
        self.names.remove(i);
        self.is_task.remove(i);
        self.deps.remove(i);
        for (j, n) in self.names.iter().enumerate() {
            self.index.insert(n.clone(), j);
        }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn deps_of(&self, name: &str) -> &[String] {
        &self.deps[self.index[name]]
    }

    pub fn dependents_of(&self, name: &str) -> Vec<String> {
        self.names
            .iter()
            .zip(&self.deps)
            .filter(|(_, deps)| deps.iter().any(|d| d == name))
            .map(|(n, _)| n.clone())
            .collect()
    }

    pub fn nodes(&self) -> Vec<Node> {
        (0..self.len())
            .map(|i| Node {
                deps: self.deps[i]
                    .iter()
                    .map(|d| {
                        *self
                            .index
                            .get(d)
                            .unwrap_or_else(|| panic!("unknown dependency {d}"))
                            as u32
                    })
                    .collect(),
                is_task: self.is_task[i],
                name: self.names[i].clone(),
            })
            .collect()
    }

    pub fn try_order(&self) -> Result<Vec<u32>, OrderError> {
        order(&self.nodes())
    }

    /// Orders the graph and checks the result is a valid execution order.
    pub fn order(&self) -> Order {
        let prio = self.try_order().expect("graph orders");
        let order = Order {
            prio: self.names.iter().cloned().zip(prio).collect(),
        };
        self.assert_topological(&order);
        order
    }

    fn assert_topological(&self, o: &Order) {
        for (name, deps) in self.names.iter().zip(&self.deps) {
            for d in deps {
                assert!(
                    o[d] < o[name],
                    "{d} (={}) must run before {name} (={})",
                    o[d],
                    o[name]
                );
            }
        }
    }

    /// Keys sorted by priority; ties keep insertion order, like Python's sort.
    pub fn run_order(&self, o: &Order) -> Vec<String> {
        let mut names = self.names.clone();
        names.sort_by_key(|n| o[n]);
        names
    }

    /// Port of upstream's `diagnostics`: results held in memory over time and
    /// how long each result was held, running tasks one at a time in order.
    pub fn diagnostics(&self, o: &Order) -> Diagnostics {
        let mut waiting: HashMap<&str, usize> = HashMap::new();
        for deps in &self.deps {
            for d in deps {
                *waiting.entry(d.as_str()).or_default() += 1;
            }
        }
        let mut pressure = Vec::new();
        let mut age = HashMap::new();
        let mut in_memory: i64 = 0;
        for (i, name) in self.run_order(o).into_iter().enumerate() {
            pressure.push(in_memory);
            let mut released = 0;
            for d in self.deps_of(&name) {
                let w = waiting.get_mut(d.as_str()).expect("dependency counted");
                *w -= 1;
                if *w == 0 {
                    age.insert(d.clone(), i as i64 - i64::from(o[d]));
                    released += 1;
                }
            }
            if waiting.get(name.as_str()).copied().unwrap_or(0) > 0 {
                in_memory += 1 - released;
            } else {
                age.insert(name.clone(), 0);
                in_memory -= released;
            }
        }
        Diagnostics { pressure, age }
    }

    pub fn max_pressure(&self, o: &Order) -> i64 {
        self.diagnostics(o).pressure.into_iter().max().unwrap_or(0)
    }
}

pub struct Diagnostics {
    pub pressure: Vec<i64>,
    pub age: HashMap<String, i64>,
}

pub struct Order {
    prio: HashMap<String, u32>,
}

impl Order {
    pub fn values_of<'a>(&'a self, names: impl IntoIterator<Item = &'a String>) -> Vec<u32> {
        names.into_iter().map(|n| self[n.as_str()]).collect()
    }
}

impl std::ops::Index<&str> for Order {
    type Output = u32;
    fn index(&self, name: &str) -> &u32 {
        self.prio
            .get(name)
            .unwrap_or_else(|| panic!("no priority for {name}"))
    }
}

impl std::ops::Index<&String> for Order {
    type Output = u32;
    fn index(&self, name: &String) -> &u32 {
        &self[name.as_str()]
    }
}

/// Upstream runs many tests with letters `abcde` and reversed, to make sure
/// name tie-breaks are not what makes them pass.
pub fn with_letters(test: impl Fn([&str; 5])) {
    test(["a", "b", "c", "d", "e"]);
    test(["e", "d", "c", "b", "a"]);
}
