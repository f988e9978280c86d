//! Round trips for every message, every truncation of a valid message is an error, and
//! no input makes a decoder panic.

use crate::addresses::AddressTable;
use crate::compute::{
    decode_compute, encode_compute, put_task, ComputeDep, ComputeTask, TaskHead, NO_BLOBS,
};
use crate::graph::{decode_update_graph, encode_update_graph};
use crate::keys::{put_key, read_keys, write_keys};
use crate::notices::encode_notices;
use crate::packed;
use crate::reader::Reader;
use crate::who_has::encode_who_has;
use crate::WireError;
use proptest::prelude::*;
use squall_core::key::KeyEncoder;
use squall_core::{
    ClientId, Config, DepRef, Finished, GraphOrder, Key, NewTask, Priority, RunSpec, Scheduler,
    Submission, TaskId, TaskOptions, WorkerId, WorkerSpec,
};
use std::sync::LazyLock;

// ----- encoders and fixtures for the tests ---------------------------------------------

/// Encodes decoded tasks again, holders named through one address table.
fn encode_tasks(tasks: &[ComputeTask<'_>]) -> (Vec<String>, Vec<u8>) {
    let mut table = AddressTable::<String>::default();
    let mut out = NO_BLOBS.to_vec();
    for t in tasks {
        let head = TaskHead {
            task: t.task,
            run_id: t.run_id,
            priority: t.priority,
            actor: t.actor,
            key: t.key,
            spec: t.spec,
            resources: &t.resources,
        };
        let deps = t.deps.iter().map(|d| {
            let holders: Vec<u16> = d
                .holders
                .iter()
                .map(|h| table.index(h.clone(), || h.clone()))
                .collect();
            (d.key, d.nbytes, holders)
        });
        put_task(&mut out, &head, deps);
    }
    (table.into_addresses(), out)
}

/// A task of [`encode_graph`]: key, spec (None = data), dependencies.
type GraphTask<'a> = (Key, Option<&'a [u8]>, Vec<Key>);

/// [`encode_update_graph`] of tasks given one by one: (payload, n, keys_bytes).
fn encode_graph(tasks: &[GraphTask<'_>]) -> (Vec<u8>, usize, usize) {
    let keys: Vec<Key> = tasks.iter().map(|t| t.0.clone()).collect();
    let specs: Vec<Option<&[u8]>> = tasks.iter().map(|t| t.1).collect();
    let deps: Vec<&[Key]> = tasks.iter().map(|t| &t.2[..]).collect();
    let (n, keys_bytes, payload) = encode_keyed(&keys, &specs, &deps, &[]);
    (payload, n, keys_bytes)
}

/// [`encode_update_graph`] of core keys.
pub(crate) fn encode_keyed<D: AsRef<[Key]>>(
    keys: &[Key],
    specs: &[Option<&[u8]>],
    deps: &[D],
    blobs: &[&[u8]],
) -> (usize, usize, Vec<u8>) {
    let put = |k: &Key, out: &mut Vec<u8>| {
        out.extend_from_slice(k.as_bytes());
        Ok::<_, std::convert::Infallible>(())
    };
    let Ok(g) = encode_update_graph(keys, specs, deps, blobs, put);
    (g.n, g.keys_bytes, g.to_vec())
}

pub(crate) fn key(s: &str) -> Key {
    Key::str(s)
}

fn tuple_key(name: &str, i: i64) -> Key {
    let mut e = KeyEncoder::new();
    e.tuple(2);
    e.str(name);
    e.int(i);
    e.finish()
}

/// The keys of [`sample_task`], which borrows them.
static SAMPLE_KEYS: LazyLock<(Key, Key)> = LazyLock::new(|| (tuple_key("y", 1), key("x")));

fn sample_task() -> ComputeTask<'static> {
    ComputeTask {
        task: 7,
        run_id: 42,
        priority: Priority {
            neg_user: -5,
            generation: 1.5,
            order: 3,
        },
        actor: true,
        key: SAMPLE_KEYS.0.as_bytes(),
        spec: b"spec-y",
        resources: vec![("GPU".into(), 1.0)],
        deps: vec![ComputeDep {
            key: SAMPLE_KEYS.1.as_bytes(),
            nbytes: 1234,
            holders: vec!["tcp://a:1".into(), "tcp://b:2".into()],
        }],
    }
}

pub(crate) fn scheduler() -> (Scheduler, ClientId, WorkerId) {
    scheduler_validating(true)
}

/// [`scheduler`], checking its invariants after every stimulus or not (a test of
/// thousands of graphs checks them at the end instead).
pub(crate) fn scheduler_validating(validate: bool) -> (Scheduler, ClientId, WorkerId) {
    let mut s = Scheduler::new(Config {
        validate,
        ..Config::default()
    });
    let c = s.client_id("c");
    let spec = WorkerSpec {
        address: "tcp://127.0.0.1:1".into(),
        name: "w".into(),
        host: "127.0.0.1".into(),
        nthreads: 1,
        memory_limit: 0,
        resources: vec![("GPU".into(), 1.0)],
    };
    let w = s.add_worker(spec, 0.0).unwrap();
    (s, c, w)
}

/// A scheduler where client `c` holds "x", computed on worker `w` (`nbytes` large);
/// the commands since are not taken.
fn x_in_memory(nbytes: i64) -> (Scheduler, ClientId, WorkerId, TaskId) {
    let (mut s, c, w) = scheduler();
    submit(
        &mut s,
        c,
        vec![NewTask::new(key("x"), vec![], spec(b"sx"))],
        0.0,
    );
    let x = s.lookup(&key("x")).unwrap();
    let run = s.task(x).run_id;
    s.take_commands();
    let report = Finished::computed(x, run, nbytes, 0.0, 0.1);
    s.task_finished(w, report, 0.1).unwrap();
    (s, c, w, x)
}

pub(crate) fn submit(s: &mut Scheduler, c: ClientId, tasks: Vec<NewTask>, now: f64) {
    s.update_graph(c, submission(tasks, Vec::new()), now)
        .unwrap();
}

/// A graph of `tasks`, all wanted, with the blob table `blobs`.
pub(crate) fn submission(tasks: Vec<NewTask>, blobs: Vec<squall_core::blobs::Blob>) -> Submission {
    let n = tasks.len() as u32;
    Submission {
        tasks,
        wanted: (0..n).map(DepRef::Local).collect(),
        defaults: TaskOptions::default(),
        fifo_timeout: 0.0,
        submitting_task: None,
        order: GraphOrder::Sequential,
        blobs,
    }
}

fn spec(b: &[u8]) -> Option<RunSpec> {
    Some(b.into())
}

/// Every proper prefix of `payload` fails to decode.
pub(crate) fn assert_prefixes_fail<T>(
    payload: &[u8],
    decode: impl Fn(&[u8]) -> Result<T, WireError>,
) {
    assert!(decode(payload).is_ok());
    for end in 1..payload.len() {
        assert!(
            decode(&payload[..end]).is_err(),
            "prefix of {end} bytes decoded"
        );
    }
}

// ----- round trips ---------------------------------------------------------------------

#[test]
fn compute_task_round_trips() {
    let t = sample_task();
    let (addresses, payload) = encode_tasks(std::slice::from_ref(&t));
    assert_eq!(addresses, ["tcp://a:1", "tcp://b:2"]);
    assert_eq!(decode_compute(&payload, &addresses).unwrap().tasks, vec![t]);
}

#[test]
fn compute_batches_are_encoded_from_the_scheduler() {
    let (mut s, c, w, _) = x_in_memory(1234);
    s.take_commands();
    let y = NewTask::new(key("y"), vec![DepRef::Key(key("x"))], spec(b"sy"));
    submit(&mut s, c, vec![y], 0.2);
    let cmds = s.take_commands();
    let batches = encode_compute(&s, &cmds, &mut Default::default());
    let batch = &batches[&w];
    assert_eq!(batch.count, 1);
    let [t] = &decode_compute(&batch.payload, &batch.addresses)
        .unwrap()
        .tasks[..]
    else {
        panic!("one task expected");
    };
    let yid = s.lookup(&key("y")).unwrap();
    assert_eq!(
        (t.task, t.run_id, t.spec),
        (yid.0, s.task(yid).run_id, &b"sy"[..])
    );
    let holders = vec!["tcp://127.0.0.1:1".to_owned()];
    let x = key("x");
    let dep = ComputeDep {
        key: x.as_bytes(),
        nbytes: 1234,
        holders,
    };
    assert_eq!(t.deps, vec![dep]);
}

#[test]
fn keys_round_trip() {
    let keys = [key("a"), tuple_key("b", -3), key("")];
    let payload = write_keys(keys.iter().map(|k| k.as_bytes()));
    assert_eq!(read_keys(&payload).unwrap(), keys);
}

#[test]
fn update_graph_round_trips() {
    let tasks = [
        (tuple_key("a", 0), Some(&b"spec-a"[..]), vec![]),
        (
            key("b"),
            Some(&b""[..]),
            vec![tuple_key("a", 0), key("old")],
        ),
        (key("d"), None, vec![key("b"), key("old")]),
    ];
    let (payload, n, keys_bytes) = encode_graph(&tasks);
    // The external key once, after the task keys.
    let keys = read_keys(&payload[..keys_bytes]).unwrap();
    assert_eq!(keys, [tuple_key("a", 0), key("b"), key("d"), key("old")]);
    let (decoded, blobs) = decode_update_graph(&payload, n, keys_bytes).unwrap();
    assert!(blobs.is_empty());
    let expected = [
        NewTask::new(tuple_key("a", 0), vec![], spec(b"spec-a")),
        NewTask::new(
            key("b"),
            vec![DepRef::Local(0), DepRef::Key(key("old"))],
            spec(b""),
        ),
        NewTask::new(
            key("d"),
            vec![DepRef::Local(1), DepRef::Key(key("old"))],
            None,
        ),
    ];
    assert_eq!(decoded.len(), expected.len());
    for (d, e) in decoded.iter().zip(&expected) {
        assert_eq!(
            (d.key(), &d.deps, d.run_spec()),
            (e.key(), &e.deps, e.run_spec())
        );
    }
}

#[test]
fn notices_and_who_has_round_trip() {
    let (mut s, c, w, x) = x_in_memory(8);
    let cmds = s.take_commands();
    let n = encode_notices(&s, &cmds);
    let payload = &n.to_clients[&(c.0, "key-in-memory")];
    assert_eq!(read_keys(payload).unwrap(), [key("x")]);

    let (addresses, payload) = encode_who_has(&s, &[key("x"), key("nope")]);
    assert_eq!(addresses, ["tcp://127.0.0.1:1"]);
    let mut r = Reader::new(&payload);
    let mut holders = Vec::new();
    while !r.done() {
        let n = r.u16("count").unwrap();
        holders.push((0..n).map(|_| r.u16("index").unwrap()).collect::<Vec<_>>());
    }
    assert_eq!(holders, [vec![0], vec![]]);

    s.client_releases_keys(c, &[key("x")], 0.2).unwrap();
    let cmds = s.take_commands();
    let n = encode_notices(&s, &cmds);
    let ids: Vec<u32> = packed::decode(&n.to_workers[&(w.0, "free-keys")], "tasks").unwrap();
    assert_eq!(ids, [x.0]);
}

#[test]
fn packed_arrays_round_trip_and_reject_ragged_lengths() {
    let xs = [1u64, u64::MAX, 0];
    assert_eq!(packed::decode::<u64>(&packed::encode(xs), "x").unwrap(), xs);
    let fs = [0.5f64, -1.0];
    assert_eq!(packed::decode::<f64>(&packed::encode(fs), "f").unwrap(), fs);
    let err = packed::decode::<u32>(b"123", "tasks").unwrap_err();
    assert_eq!(
        err.to_string(),
        "tasks: buffer length 3 is not a multiple of 4"
    );
}

// ----- malformed input -----------------------------------------------------------------

#[test]
fn every_truncation_is_an_error() {
    let t = sample_task();
    let (addresses, payload) = encode_tasks(&[t]);
    // A payload may end after any task: the tasks' prefixes (the blob section's are
    // tested with the blobs).
    let tasks = &payload[NO_BLOBS.len()..];
    assert_prefixes_fail(tasks, |p| {
        decode_compute(&[&NO_BLOBS, p].concat(), &addresses).map(|c| c.tasks.len())
    });
    let payload = write_keys([tuple_key("a", 7).as_bytes()]);
    assert_prefixes_fail(&payload, read_keys);
    let tasks = [
        (key("a"), Some(&b"sa"[..]), vec![]),
        (key("b"), None, vec![key("a"), key("ext")]),
    ];
    let (payload, n, keys_bytes) = encode_graph(&tasks);
    assert_prefixes_fail(&payload, |p| decode_update_graph(p, n, keys_bytes));
}

#[test]
fn counts_beyond_the_bytes_present_are_refused_before_allocating() {
    let mut t = sample_task();
    t.deps.clear();
    let (addresses, mut payload) = encode_tasks(&[t]);
    let at = payload.len() - 4;
    payload[at..].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = decode_compute(&payload, &addresses).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::CountTooLarge {
                what: "dependencies",
                ..
            }
        ),
        "{err}"
    );
    let (payload, _, keys_bytes) = encode_graph(&[]);
    let err = decode_update_graph(&payload, usize::MAX, keys_bytes).unwrap_err();
    assert!(matches!(err, WireError::TooFewKeys { .. }), "{err}");
    let (payload, _, keys_bytes) = encode_graph(&[(key("a"), None, vec![])]);
    let err = decode_update_graph(&payload[..keys_bytes], 1, keys_bytes).unwrap_err();
    assert!(
        matches!(err, WireError::CountTooLarge { what: "tasks", .. }),
        "{err}"
    );
}

#[test]
fn bad_indices_offsets_and_keys_are_errors() {
    let (_, payload) = encode_tasks(&[sample_task()]);
    let err = decode_compute(&payload, &["only-one".into()]).unwrap_err();
    assert!(
        matches!(err, WireError::BadIndex { what: "holder", .. }),
        "{err}"
    );
    let (mut payload, n, kb) = encode_graph(&[(key("a"), None, vec![key("x")])]);
    // sizes[1], offsets[2], then the index of "x" (1), made 5.
    payload[kb + 16..kb + 20].copy_from_slice(&5u32.to_le_bytes());
    let err = decode_update_graph(&payload, n, kb).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::BadIndex {
                what: "dependency",
                index: 5,
                ..
            }
        ),
        "{err}"
    );
    let (mut payload, n, kb) = encode_graph(&[(key("a"), None, vec![])]);
    payload[kb + 8..kb + 12].copy_from_slice(&1u32.to_le_bytes()); // offsets [1, 0]
    assert_eq!(
        decode_update_graph(&payload, n, kb).unwrap_err(),
        WireError::BadOffsets
    );
    let mut bad_key = Vec::new();
    put_key(&mut bad_key, &[0xff]);
    assert_eq!(read_keys(&bad_key).unwrap_err(), WireError::BadKey);
    assert!(read_keys(&bad_key)
        .unwrap_err()
        .to_string()
        .contains("malformed key"));
}

#[test]
fn deeply_nested_keys_are_refused_not_overflowing_the_stack() {
    let mut k = Vec::new();
    for _ in 0..1_000_000 {
        k.extend_from_slice(&[b'T', 1]);
    }
    k.extend_from_slice(&[b'I', 0]);
    let payload = write_keys([&k[..]]);
    assert_eq!(read_keys(&payload).unwrap_err(), WireError::BadKey);
}

/// Single-byte and splice mutations of a valid message.
fn mutated(valid: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = valid.len();
    prop::collection::vec((0..len, any::<u8>()), 1..4).prop_map(move |edits| {
        let mut b = valid.clone();
        for (at, byte) in edits {
            b[at] = byte;
        }
        b
    })
}

fn decode_all(b: &[u8], n: usize, keys_bytes: usize) {
    let addresses = ["tcp://a:1".to_owned(), "tcp://b:2".to_owned()];
    let _ = decode_compute(b, &addresses);
    let _ = read_keys(b);
    let _ = decode_update_graph(b, n, keys_bytes);
    let _ = packed::decode::<u32>(b, "x");
    let _ = packed::decode::<f64>(b, "x");
}

proptest! {
    #[test]
    fn random_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..256),
                                n in 0usize..8, keys_bytes in 0usize..300) {
        decode_all(&b, n, keys_bytes);
    }

    #[test]
    fn mutated_compute_never_panics(b in mutated(encode_tasks(&[sample_task(), sample_task()]).1)) {
        decode_all(&b, 0, 0);
    }

    #[test]
    fn mutated_update_graph_never_panics(b in mutated(encode_graph(&[
        (key("a"), Some(&b"sa"[..]), vec![]),
        (tuple_key("b", 2), None, vec![key("a"), key("ext")]),
    ]).0), n in 0usize..4) {
        let keys_bytes = write_keys([key("a"), tuple_key("b", 2), key("ext")].iter().map(|k| k.as_bytes())).len();
        decode_all(&b, n, keys_bytes);
    }

    /// Any graph decodes to its tasks (a dependency on a task of the graph by its index,
    /// on any other key by the key), and every truncation of it is an error.
    #[test]
    fn arbitrary_graphs_round_trip(tasks in prop::collection::vec((
        prop::option::of(prop::collection::vec(any::<u8>(), 0..8)),
        prop::collection::vec(0usize..10, 0..4),
    ), 0..6)) {
        let n = tasks.len();
        // Dependency d names task d if there is one, else external key ("ext", d).
        let dep_key = |d: usize| if d < n { tuple_key("t", d as i64) } else { tuple_key("ext", d as i64) };
        let keys: Vec<Key> = (0..n).map(dep_key).collect();
        let specs: Vec<Option<&[u8]>> = tasks.iter().map(|(s, _)| s.as_deref()).collect();
        let deps: Vec<Vec<Key>> = tasks.iter().map(|(_, ds)| ds.iter().map(|&d| dep_key(d)).collect()).collect();
        let (n, keys_bytes, payload) = encode_keyed(&keys, &specs, &deps, &[]);
        let (decoded, blobs) = decode_update_graph(&payload, n, keys_bytes).unwrap();
        prop_assert_eq!(decoded.len(), tasks.len());
        for (i, (t, (spec, ds))) in decoded.iter().zip(&tasks).enumerate() {
            let expected: Vec<DepRef> = ds.iter().map(|&d| {
                if d < n { DepRef::Local(d as u32) } else { DepRef::Key(dep_key(d)) }
            }).collect();
            prop_assert_eq!(t.key(), &*keys[i]);
            prop_assert_eq!(&t.deps, &expected);
            // A spec starting with the blob tag travels behind an empty blob header.
            let sent = t.run_spec().map(|s| squall_core::blobs::join(s, &blobs));
            prop_assert_eq!(sent.as_deref(), spec.as_deref());
        }
        // The external keys, each once, in the order first named.
        let mut external: Vec<Key> = Vec::new();
        for d in tasks.iter().flat_map(|(_, ds)| ds).filter(|&&d| d >= n) {
            if !external.contains(&dep_key(*d)) {
                external.push(dep_key(*d));
            }
        }
        prop_assert_eq!(read_keys(&payload[..keys_bytes]).unwrap(), [keys, external].concat());
        for end in 0..payload.len() {
            prop_assert!(decode_update_graph(&payload[..end], n, keys_bytes).is_err());
        }
    }

    #[test]
    fn arbitrary_compute_tasks_round_trip(
        task in any::<u32>(), run_id in any::<u64>(), neg_user in any::<i32>(),
        generation in -1e9f64..1e9, order in any::<u32>(), actor in any::<bool>(),
        name in "[a-z]{0,8}", spec in prop::collection::vec(any::<u8>(), 0..16),
        resources in prop::collection::vec(("[A-Z]{1,4}", 0.0f64..8.0), 0..3),
        deps in prop::collection::vec(("[a-z]{1,4}", any::<i64>(), prop::collection::vec(0usize..3, 0..3)), 0..4),
    ) {
        let hosts = ["tcp://a:1", "tcp://b:2", "tcp://c:3"];
        let name = key(&name);
        let dep_keys: Vec<Key> = deps.iter().map(|(k, _, _)| key(k)).collect();
        let t = ComputeTask {
            task, run_id, priority: Priority { neg_user, generation, order }, actor,
            key: name.as_bytes(), spec: &spec, resources,
            deps: deps.into_iter().zip(&dep_keys).map(|((_, nbytes, hs), k)| ComputeDep {
                key: k.as_bytes(), nbytes, holders: hs.into_iter().map(|h| hosts[h].to_owned()).collect(),
            }).collect(),
        };
        let (addresses, payload) = encode_tasks(std::slice::from_ref(&t));
        prop_assert_eq!(decode_compute(&payload, &addresses).unwrap().tasks, vec![t]);
    }
}
