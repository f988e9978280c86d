//! Scheduler knobs (docs/config.md#squallscheduler) with Dask's defaults.
//!
//! Each setting is declared once, in the `settings!` table below: its Dask name, its
//! field and type, its default and its [`Kind`] (what values it takes, their range and
//! whether the text "inf" is one). The struct, its `Default`, the range check and the
//! conversion by name (`Config::set`, `Config::values`, which the binding and through
//! it `squall.config` use) all come from that table.

use std::collections::HashMap;
use std::fmt;

/// What values a setting takes, and how users write them (docs/config.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// true or false.
    Flag,
    /// An integer >= 0.
    Count,
    /// A number > 0, or "inf" (the only kind that reads that text).
    NumberOrInf,
    /// Seconds >= 0; users write durations, a bare number being seconds.
    Duration,
    /// Seconds >= 0; users write durations, a bare number being milliseconds (Dask's
    /// reading of `work-stealing-interval`).
    DurationMs,
    /// Bytes >= 0.
    Bytes,
    /// Bytes per second >= 0; users write a size.
    BytesPerSecond,
    /// Seconds >= 0 per task prefix.
    DurationsByPrefix,
}

impl Kind {
    /// The kind's name, which `squall.config` picks its parser by.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Flag => "flag",
            Kind::Count => "count",
            Kind::NumberOrInf => "number-or-inf",
            Kind::Duration => "duration",
            Kind::DurationMs => "duration-ms",
            Kind::Bytes => "bytes",
            Kind::BytesPerSecond => "bytes-per-second",
            Kind::DurationsByPrefix => "durations-by-prefix",
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Kind::Flag => "true or false",
            Kind::Count => "an integer >= 0",
            Kind::NumberOrInf => "a number or 'inf'",
            Kind::Duration | Kind::DurationMs => "seconds as a number",
            Kind::Bytes => "bytes as an integer",
            Kind::BytesPerSecond => "bytes/s as a number",
            Kind::DurationsByPrefix => "a mapping of task prefix to seconds",
        }
    }

    /// The one place the ranges are checked: an error names the setting and what it
    /// must be.
    fn check(self, name: &str, value: &Value) -> Result<(), String> {
        let bad = match (self, value) {
            (Kind::NumberOrInf, Value::Number(x)) if x.is_nan() || *x <= 0.0 => "> 0 or 'inf'",
            (Kind::Duration | Kind::DurationMs, Value::Number(x)) if x.is_nan() || *x < 0.0 => {
                ">= 0 seconds"
            }
            (Kind::Bytes, Value::Int(x)) if *x < 0 => ">= 0 bytes",
            (Kind::BytesPerSecond, Value::Number(x)) if x.is_nan() || *x < 0.0 => ">= 0 bytes/s",
            (Kind::DurationsByPrefix, Value::Map(entries)) => {
                return entries
                    .iter()
                    .try_for_each(|(_, v)| Kind::Duration.check(name, v))
            }
            _ => return Ok(()),
        };
        Err(format!("{name}: must be {bad}, got {value}"))
    }
}

/// One setting as the table declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// Dask's name, e.g. `worker-saturation`.
    pub name: &'static str,
    pub kind: Kind,
    /// Whether `null` is a value (it disables the setting).
    pub nullable: bool,
}

/// A setting's value, as a caller (the binding) hands it over and gets it back.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Flag(bool),
    Int(i64),
    Number(f64),
    Text(String),
    Map(Vec<(String, Value)>),
    /// Anything else, shown as the caller spells it (never a setting's value).
    Other(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Flag(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Number(x) => write!(f, "{x}"),
            Value::Text(s) => write!(f, "'{s}'"),
            Value::Map(entries) => {
                f.write_str("{")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}'{k}': {v}")?;
                }
                f.write_str("}")
            }
            Value::Other(s) => f.write_str(s),
        }
    }
}

/// A field's type: how a [`Value`] becomes one (None: not a value of this type).
trait Field: Sized {
    const NULLABLE: bool = false;
    fn to_value(&self) -> Value;
    fn from_value(value: Value, kind: Kind) -> Option<Self>;
    /// Sets the field from `value`; false if `value` is not one.
    fn assign(&mut self, value: Value, kind: Kind) -> bool {
        Self::from_value(value, kind).map(|v| *self = v).is_some()
    }
}

impl Field for bool {
    fn to_value(&self) -> Value {
        Value::Flag(*self)
    }
    fn from_value(value: Value, _: Kind) -> Option<Self> {
        match value {
            Value::Flag(b) => Some(b),
            _ => None,
        }
    }
}

impl Field for f64 {
    fn to_value(&self) -> Value {
        Value::Number(*self)
    }
    fn from_value(value: Value, kind: Kind) -> Option<Self> {
        match value {
            Value::Number(x) => Some(x),
            Value::Int(i) => Some(i as f64),
            // "inf" is read here and nowhere else (also "1.5", as Python's float()).
            Value::Text(s) if kind == Kind::NumberOrInf => s.trim().parse().ok(),
            _ => None,
        }
    }
}

impl Field for Option<f64> {
    const NULLABLE: bool = true;
    fn to_value(&self) -> Value {
        self.map_or(Value::Null, Value::Number)
    }
    fn from_value(value: Value, kind: Kind) -> Option<Self> {
        match value {
            Value::Null => Some(None),
            v => f64::from_value(v, kind).map(Some),
        }
    }
}

macro_rules! integer_fields {
    ($($ty:ty),*) => {$(
        impl Field for $ty {
            fn to_value(&self) -> Value {
                Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
            }
            fn from_value(value: Value, _: Kind) -> Option<Self> {
                match value {
                    Value::Int(i) => Self::try_from(i).ok(),
                    _ => None,
                }
            }
        }
    )*};
}
integer_fields!(usize, u32, i64);

impl Field for HashMap<String, f64> {
    fn to_value(&self) -> Value {
        let mut entries: Vec<_> = self
            .iter()
            .map(|(k, v)| (k.clone(), Value::Number(*v)))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Value::Map(entries)
    }
    fn from_value(value: Value, _: Kind) -> Option<Self> {
        let Value::Map(entries) = value else {
            return None;
        };
        entries
            .into_iter()
            .map(|(k, v)| Some((k, f64::from_value(v, Kind::Duration)?)))
            .collect()
    }
    /// Merges: the given prefixes join (or replace) the known ones.
    fn assign(&mut self, value: Value, kind: Kind) -> bool {
        Self::from_value(value, kind)
            .map(|m| self.extend(m))
            .is_some()
    }
}

/// Declares the settings: `"dask-name" => field: Type = default, Kind;` each.
macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])*
        $name:literal => $field:ident: $ty:ty = $default:expr, $kind:ident;
    )*) => {
        #[derive(Clone, Debug)]
        pub struct Config {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        impl Default for Config {
            fn default() -> Self {
                Config { $( $field: $default, )* }
            }
        }

        /// Every setting, in the order of docs/config.md.
        pub const SETTINGS: &[Setting] = &[
            $( Setting { name: $name, kind: Kind::$kind, nullable: <$ty as Field>::NULLABLE }, )*
        ];

        impl Config {
            /// Every setting with its value, in the order of [`SETTINGS`].
            pub fn values(&self) -> Vec<(&'static Setting, Value)> {
                SETTINGS.iter().zip([$( self.$field.to_value() ),*]).collect()
            }

            /// Sets the setting called `name` (Dask's name) to `value`, read as its kind
            /// reads it (`default-task-durations` merges). The range is `check`'s.
            pub fn set(&mut self, name: &str, value: Value) -> Result<(), String> {
                let shown = value.to_string();
                let (ok, kind, nullable) = match name {
                    $( $name => (
                        self.$field.assign(value, Kind::$kind),
                        Kind::$kind,
                        <$ty as Field>::NULLABLE,
                    ), )*
                    _ => return Err(format!("unknown scheduler config option {name:?}")),
                };
                let null = if nullable { " or null" } else { "" };
                ok.then_some(())
                    .ok_or_else(|| format!("{name}: expected {}{null}, got {shown}", kind.expected()))
            }
        }
    };
}

settings! {
    /// `f64::INFINITY` disables queuing.
    "worker-saturation" => worker_saturation: f64 = 1.1, NumberOrInf;
    /// squall's extension of queuing for tiny tasks: a worker may hold more than
    /// `worker_saturation × nthreads` queued-root tasks while they amount to less than
    /// this many seconds of expected work per thread (0 disables).
    "worker-saturation-duration" => worker_saturation_duration: f64 = 0.01, Duration;
    "rootish-taskgroup" => rootish_taskgroup: usize = 5, Count;
    "rootish-taskgroup-dependencies" => rootish_taskgroup_dependencies: usize = 5, Count;
    "work-stealing" => work_stealing: bool = true, Flag;
    /// Seconds between stealing balance passes (driven by `Tick` events).
    "work-stealing-interval" => work_stealing_interval: f64 = 1.0, DurationMs;
    "allowed-failures" => allowed_failures: u32 = 3, Count;
    /// Seconds assumed for a task whose prefix has no measurement yet.
    "unknown-task-duration" => unknown_task_duration: f64 = 0.5, Duration;
    /// Seconds per prefix known in advance (prefixes at ≤ 1 ms are never stolen).
    "default-task-durations" => default_task_durations: HashMap<String, f64> =
        ["rechunk-split", "split-shuffle", "split-taskshuffle", "split-stage"]
            .iter()
            .map(|p| (p.to_string(), 1e-6))
            .collect(),
        DurationsByPrefix;
    /// Bytes assumed for a result of unknown size.
    "default-data-size" => default_data_size: i64 = 1024, Bytes;
    /// Initial bandwidth estimate, bytes/s.
    "bandwidth" => bandwidth: f64 = 100_000_000.0, BytesPerSecond;
    /// Seconds of silence after which a worker is removed (at least 10 heartbeats).
    "worker-ttl" => worker_ttl: Option<f64> = Some(300.0), Duration;
    "no-workers-timeout" => no_workers_timeout: Option<f64> = None, Duration;
    /// Length of the transition log behind `story()`; 0 disables logging.
    "transition-log-length" => transition_log_length: usize = 1000, Count;
    "erred-tasks-max-history" => erred_tasks_max_history: usize = 100, Count;
    /// Arms the memory guard of `_add_to_processing` (worker.memory.terminate).
    "memory-terminate" => memory_terminate: bool = true, Flag;
    /// Run the invariant checker after every stimulus (tests).
    "validate" => validate: bool = false, Flag;
}

impl Config {
    /// Checks every setting's range: an error names the setting (Dask's name) and what
    /// it must be.
    pub fn check(&self) -> Result<(), String> {
        self.values()
            .iter()
            .try_for_each(|(s, v)| s.kind.check(s.name, v))
    }
}

#[cfg(test)]
mod tests {
    use super::{Config, Value, SETTINGS};

    #[test]
    fn check_names_the_knob_out_of_range() {
        assert_eq!(Config::default().check(), Ok(()));
        let ttl = Config {
            worker_ttl: Some(-1.0),
            ..Config::default()
        };
        assert_eq!(
            ttl.check(),
            Err("worker-ttl: must be >= 0 seconds, got -1".into())
        );
        let sat = Config {
            worker_saturation: f64::NAN,
            ..Config::default()
        };
        assert!(sat.check().unwrap_err().starts_with("worker-saturation:"));
        let inf = Config {
            worker_saturation: f64::INFINITY,
            ..Config::default()
        };
        assert_eq!(inf.check(), Ok(()));
        let slow = Config {
            default_task_durations: [("x".to_string(), -2.0)].into(),
            ..Config::default()
        };
        assert_eq!(
            slow.check(),
            Err("default-task-durations: must be >= 0 seconds, got -2".into())
        );
    }

    #[test]
    fn every_default_reads_back_as_itself() {
        // A kind that does not fit its field's type would fail here.
        let defaults = Config::default().values();
        assert_eq!(defaults.len(), SETTINGS.len());
        let mut c = Config::default();
        for (s, v) in &defaults {
            c.set(s.name, v.clone()).unwrap();
            assert_eq!(
                s.nullable,
                s.name == "worker-ttl" || s.name == "no-workers-timeout"
            );
        }
        assert_eq!(c.values(), defaults);
    }

    #[test]
    fn set_reads_each_kind() {
        let mut c = Config::default();
        c.set("worker-saturation", Value::Text("inf".into()))
            .unwrap();
        assert_eq!(c.worker_saturation, f64::INFINITY);
        assert_eq!(
            c.set("worker-saturation", Value::Text("lots".into())),
            Err("worker-saturation: expected a number or 'inf', got 'lots'".into())
        );
        assert_eq!(
            c.set("worker-ttl", Value::Text("inf".into())),
            Err("worker-ttl: expected seconds as a number or null, got 'inf'".into())
        );
        c.set("worker-ttl", Value::Null).unwrap();
        assert_eq!(c.worker_ttl, None);
        c.set("bandwidth", Value::Int(5)).unwrap();
        assert_eq!(c.bandwidth, 5.0);
        assert!(c.set("allowed-failures", Value::Int(-1)).is_err());
        assert!(c.set("work-stealing", Value::Int(1)).is_err());
        let durations = Value::Map(vec![("f".into(), Value::Int(2))]);
        c.set("default-task-durations", durations).unwrap();
        assert_eq!(c.default_task_durations.len(), 5); // merged with the defaults
        assert_eq!(
            c.set("no-such-knob", Value::Null),
            Err("unknown scheduler config option \"no-such-knob\"".into())
        );
    }
}
