//! `update-graph`'s blob table: blobs cut out of the specs travel once, the scheduler
//! keeps one copy per task group, a worker is sent each blob once and gets each spec
//! whole; malformed tables and references are errors that change nothing.

use crate::compute::{
    decode_compute, encode_compute, ComputeBatch, SentBlobs, MAX_HELD_BLOBS, MAX_HELD_BLOB_BYTES,
    NO_BLOBS,
};
use crate::graph::decode_update_graph;
use crate::tests::{
    assert_prefixes_fail, encode_keyed, key, scheduler, scheduler_validating, submission,
};
use crate::WireError;
use proptest::prelude::*;
use rustc_hash::FxHashMap;
use squall_core::blobs::{self, BLOB_TAG};
use squall_core::{CoreError, Finished, Key, NewTask, Scheduler, TaskId, WorkerId};

const F: &[u8] = b"<the pickled function, shared by every spec>";
const G: &[u8] = b"<another function, long enough to be cut>";

/// Specs `prefix | F | middle | G | suffix` for tasks ("t-i").
fn graph(n: usize) -> (Vec<Key>, Vec<Vec<u8>>) {
    let keys = (0..n).map(|i| key(&format!("t-{i}"))).collect();
    let specs = (0..n)
        .map(|i| {
            [
                &b"\x80head"[..],
                F,
                format!("mid{i}").as_bytes(),
                G,
                b"tail",
            ]
            .concat()
        })
        .collect();
    (keys, specs)
}

fn encode(keys: &[Key], specs: &[Vec<u8>], blobs: &[&[u8]]) -> (usize, usize, Vec<u8>) {
    let specs: Vec<Option<&[u8]>> = specs.iter().map(|s| Some(&s[..])).collect();
    encode_keyed(keys, &specs, &[] as &[Vec<Key>], blobs)
}

#[test]
fn blobs_travel_once_and_workers_get_whole_specs() {
    let (keys, specs) = graph(20);
    let (n, kb, payload) = encode(&keys, &specs, &[F, G, b"short"]);
    let (plain_n, plain_kb, plain) = encode(&keys, &specs, &[]);
    assert_eq!((n, kb), (plain_n, plain_kb));
    // Each blob once instead of 20 times; per spec 5 + 2 × 8 bytes of references.
    let saved = 19 * (F.len() + G.len()) - 20 * (5 + 16) - (3 * 4 + 5);
    assert_eq!(payload.len(), plain.len() - saved);
    let (tasks, table) = decode_update_graph(&payload, n, kb).unwrap();
    assert_eq!(table.len(), 3);
    for (t, spec) in tasks.iter().zip(&specs) {
        let sent = t.run_spec().unwrap();
        assert_eq!(sent[0], BLOB_TAG);
        assert_eq!(blobs::join(sent, &table), *spec);
    }
    // Held by the scheduler: the short specs, and each blob once in the tasks' group.
    let (mut s, c, _w) = scheduler();
    s.update_graph(c, submission(tasks, table), 0.0).unwrap();
    s.validate().unwrap();
    let t0 = s.lookup(&keys[0]).unwrap();
    assert_eq!(s.group(s.task(t0).group).blobs.len(), 2);
    // A second graph of the same group adds no copy.
    let (more_keys, more_specs) = graph(25);
    let (n, kb, payload) = encode(&more_keys[20..], &more_specs[20..], &[G, F]);
    let (tasks, table) = decode_update_graph(&payload, n, kb).unwrap();
    s.update_graph(c, submission(tasks, table), 0.0).unwrap();
    s.validate().unwrap();
    assert_eq!(s.group(s.task(t0).group).blobs.len(), 2);
    // The worker gets every spec as the client pickled it, each blob once.
    let mut w = WorkerCache::default();
    let mut sent = FxHashMap::default();
    let cmds = s.take_commands();
    let mut n_sent = 0;
    for b in encode_compute(&s, &cmds, &mut sent).values() {
        for (k, spec) in w.read(b) {
            let i: usize = k.as_str().unwrap()[2..].parse().unwrap();
            assert_eq!(spec, more_specs[i]);
            n_sent += 1;
        }
    }
    assert!(n_sent > 0);
    assert_eq!((w.added, w.blobs.len()), (2, 2));
}

/// A worker's blob cache, as the worker keeps it.
#[derive(Default)]
struct WorkerCache {
    blobs: FxHashMap<u32, Vec<u8>>,
    /// Blobs received so far.
    added: usize,
}

impl WorkerCache {
    /// Reads a batch: its tasks' keys and whole specs.
    fn read(&mut self, b: &ComputeBatch) -> Vec<(Key, Vec<u8>)> {
        let c = decode_compute(&b.payload, &b.addresses).unwrap();
        for id in &c.dropped {
            assert!(self.blobs.remove(id).is_some(), "dropped {id}, not held");
        }
        for (id, blob) in &c.added {
            assert!(
                self.blobs.insert(*id, blob.to_vec()).is_none(),
                "{id} sent twice"
            );
            self.added += 1;
        }
        let whole = |spec: &[u8]| match blobs::references(spec) {
            None => spec.to_vec(),
            Some(refs) => {
                let (refs, body) = refs.unwrap();
                let mut out = Vec::new();
                let mut at = 0;
                for (offset, id) in refs {
                    out.extend_from_slice(&body[at..offset]);
                    out.extend_from_slice(&self.blobs[&id]);
                    at = offset;
                }
                out.extend_from_slice(&body[at..]);
                out
            }
        };
        c.tasks
            .iter()
            .map(|t| (Key::from_encoded(t.key).unwrap(), whole(t.spec)))
            .collect()
    }
}

/// The batch the one worker is sent now.
fn dispatch(s: &mut Scheduler, sent: &mut FxHashMap<WorkerId, SentBlobs>) -> ComputeBatch {
    let cmds = s.take_commands();
    let mut batches = encode_compute(s, &cmds, sent);
    assert_eq!(batches.len(), 1);
    batches.pop_first().unwrap().1
}

/// Runs every task to the end on the one worker `w`, batch after batch: the keys and
/// whole specs it got.
fn run_all(
    s: &mut Scheduler,
    w: WorkerId,
    sent: &mut FxHashMap<WorkerId, SentBlobs>,
    cache: &mut WorkerCache,
) -> Vec<(Key, Vec<u8>)> {
    let mut got = Vec::new();
    loop {
        let cmds = s.take_commands();
        let Some((_, b)) = encode_compute(s, &cmds, sent).pop_first() else {
            return got;
        };
        got.extend(cache.read(&b));
        for t in decode_compute(&b.payload, &b.addresses).unwrap().tasks {
            let done = Finished::computed(TaskId(t.task), t.run_id, 8, 0.0, 0.1);
            s.task_finished(w, done, 1.0).unwrap();
        }
    }
}

#[test]
fn a_worker_is_sent_each_blob_once_and_told_to_drop_it_when_its_graph_is_gone() {
    let (mut s, c, w) = scheduler();
    let mut sent = FxHashMap::default();
    let mut cache = WorkerCache::default();
    let (keys, specs) = graph(8);
    let submit = |s: &mut Scheduler, keys: &[Key], specs: &[Vec<u8>], table: &[&[u8]]| {
        let (n, kb, payload) = encode(keys, specs, table);
        let (tasks, table) = decode_update_graph(&payload, n, kb).unwrap();
        s.update_graph(c, submission(tasks, table), 0.0).unwrap();
    };
    // Four tasks, then four more of the same group: the blobs travel with the first.
    submit(&mut s, &keys[..4], &specs[..4], &[F, G]);
    assert_eq!(run_all(&mut s, w, &mut sent, &mut cache).len(), 4);
    assert_eq!(cache.added, 2);
    submit(&mut s, &keys[4..], &specs[4..], &[F, G]);
    for (k, spec) in run_all(&mut s, w, &mut sent, &mut cache) {
        let i: usize = k.as_str().unwrap()[2..].parse().unwrap();
        assert_eq!(spec, specs[i]);
    }
    assert_eq!((cache.added, sent[&w].len()), (2, 2));
    // Released: the next batch that sends blobs drops the graph's.
    s.client_releases_keys(c, &keys, 2.0).unwrap();
    s.validate().unwrap();
    let other = [key("other")];
    let spec = [[&b"\x80"[..], G, b"!"].concat()];
    submit(&mut s, &other, &spec, &[G]);
    let got = run_all(&mut s, w, &mut sent, &mut cache);
    assert_eq!(got, vec![(other[0].clone(), spec[0].clone())]);
    assert_eq!((cache.added, cache.blobs.len(), sent[&w].len()), (3, 1, 1));
}

#[test]
fn a_batch_naming_a_blob_it_lacks_or_with_a_malformed_blob_section_is_an_error() {
    let (mut s, c, _w) = scheduler();
    let (keys, specs) = graph(2);
    let (n, kb, payload) = encode(&keys, &specs, &[F]);
    let (tasks, table) = decode_update_graph(&payload, n, kb).unwrap();
    s.update_graph(c, submission(tasks, table), 0.0).unwrap();
    let b = dispatch(&mut s, &mut FxHashMap::default());
    let addresses = &b.addresses;
    // Cut inside the blob section (the tasks' own prefixes are tested with them).
    for end in 1..8 + 8 + F.len() {
        assert!(
            decode_compute(&b.payload[..end], addresses).is_err(),
            "{end}"
        );
    }
    // Counts beyond the bytes present, and a blob longer than the payload.
    for (at, what) in [(0, "dropped blobs"), (4, "blobs")] {
        let mut bad = b.payload.clone();
        bad[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = decode_compute(&bad, addresses).unwrap_err();
        assert!(
            matches!(err, WireError::CountTooLarge { what: w, .. } if w == what),
            "{err}"
        );
    }
    let mut long = b.payload.clone();
    long[12..16].copy_from_slice(&u32::MAX.to_le_bytes()); // the first blob's length
    let err = decode_compute(&long, addresses).unwrap_err();
    assert!(
        matches!(err, WireError::Truncated { what: "blob", .. }),
        "{err}"
    );
    // Without the blob section's blob, the specs name a blob nobody sent.
    let c = decode_compute(&b.payload, addresses).unwrap();
    assert_eq!(c.added.len(), 1);
    let mut cache = WorkerCache::default();
    let mut bare = NO_BLOBS.to_vec();
    bare.extend_from_slice(&b.payload[8 + 8 + F.len()..]);
    let stripped = ComputeBatch {
        addresses: b.addresses.clone(),
        payload: bare,
        count: b.count,
    };
    let missing = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cache.read(&stripped)));
    assert!(missing.is_err());
}

#[test]
fn a_blob_reference_out_of_range_is_refused_and_nothing_is_added() {
    let (keys, specs) = graph(3);
    let (n, kb, payload) = encode(&keys, &specs, &[F]);
    let (mut tasks, table) = decode_update_graph(&payload, n, kb).unwrap();
    let mut bad = tasks[2].run_spec().unwrap().to_vec();
    bad[9..13].copy_from_slice(&7u32.to_le_bytes()); // the first reference's blob
    tasks[2].text = squall_core::TaskText::new(tasks[2].key(), Some(&bad));
    let (mut s, c, _w) = scheduler();
    let err = s
        .update_graph(c, submission(tasks, table), 0.0)
        .unwrap_err();
    assert!(
        matches!(&err, CoreError::Invalid(m) if m.contains("blob reference 7 out of range")),
        "{err}"
    );
    assert!(keys.iter().all(|k| s.lookup(k).is_none()));
    s.validate().unwrap();
    // Without a table, and with references past the bytes present or out of order.
    let spec = |b: &[u8]| NewTask::new(key("x"), vec![], Some(b.into()));
    for (bad, what) in [
        (
            &b"\x02\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00body"[..],
            "out of range",
        ),
        (b"\x02\x05\x00\x00\x00", "truncated"),
        (b"\x02\x00", "truncated"),
        (
            b"\x02\x01\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00body",
            "past the body",
        ),
    ] {
        let err = s
            .update_graph(c, submission(vec![spec(bad)], vec![]), 0.0)
            .unwrap_err();
        assert!(err.to_string().contains(what), "{err}");
    }
    assert!(s.lookup(&key("x")).is_none());
    s.validate().unwrap();
}

#[test]
fn a_truncated_or_overlong_blob_table_is_an_error() {
    let (keys, specs) = graph(2);
    let (n, kb, payload) = encode(&keys, &specs, &[F, G]);
    assert_prefixes_fail(&payload, |p| decode_update_graph(p, n, kb));
    // The blob count right after the dependency offsets (no dependencies), made huge.
    let at = kb + 8 * n + 4 * (n + 1);
    let mut huge = payload.clone();
    huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = decode_update_graph(&huge, n, kb).unwrap_err();
    assert!(
        matches!(err, WireError::CountTooLarge { what: "blobs", .. }),
        "{err}"
    );
    // A blob size past the bytes present.
    let mut long = payload;
    long[at + 4..at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = decode_update_graph(&long, n, kb).unwrap_err();
    assert!(
        matches!(err, WireError::Truncated { what: "blob", .. }),
        "{err}"
    );
}

proptest! {
    /// Specs made of arbitrary pieces and blobs (blobs also overlapping, repeated, or
    /// found by chance) come back whole from the short specs and the table.
    #[test]
    fn arbitrary_specs_and_blobs_round_trip(
        table in prop::collection::vec(prop::collection::vec(0u8..3, 0..14), 0..4),
        parts in prop::collection::vec(
            prop::option::of(prop::collection::vec((prop::collection::vec(0u8..3, 0..6), 0usize..6), 0..5)),
            0..6,
        ),
    ) {
        let specs: Vec<Option<Vec<u8>>> = parts.iter().map(|p| p.as_ref().map(|pieces| {
            let mut spec = Vec::new();
            for (bytes, b) in pieces {
                spec.extend_from_slice(bytes);
                if let Some(blob) = table.get(*b) {
                    spec.extend_from_slice(blob);
                }
            }
            spec
        })).collect();
        let keys: Vec<Key> = (0..specs.len()).map(|i| key(&format!("t{i}"))).collect();
        let spec_refs: Vec<Option<&[u8]>> = specs.iter().map(|s| s.as_deref()).collect();
        let blob_refs: Vec<&[u8]> = table.iter().map(|b| &b[..]).collect();
        let (n, kb, payload) = encode_keyed(&keys, &spec_refs, &[] as &[Vec<Key>], &blob_refs);
        let (tasks, decoded) = decode_update_graph(&payload, n, kb).unwrap();
        for (t, spec) in tasks.iter().zip(&specs) {
            let sent = t.run_spec();
            if let Some(sent) = sent {
                prop_assert!(blobs::check(sent, decoded.len()).is_ok());
            }
            prop_assert_eq!(sent.map(|s| blobs::join(s, &decoded)), spec.clone());
        }
        for end in 0..payload.len() {
            prop_assert!(decode_update_graph(&payload[..end], n, kb).is_err());
        }
    }
}

/// A scheduler with one client and one worker, the scheduler's record of the blobs
/// sent to that worker, and the worker's cache.
struct Rig {
    s: Scheduler,
    c: squall_core::ClientId,
    w: WorkerId,
    sent: FxHashMap<WorkerId, SentBlobs>,
    cache: WorkerCache,
}

impl Rig {
    fn new((s, c, w): (Scheduler, squall_core::ClientId, WorkerId)) -> Self {
        let (sent, cache) = (FxHashMap::default(), WorkerCache::default());
        Rig {
            s,
            c,
            w,
            sent,
            cache,
        }
    }

    /// One graph of one task in group `name`, whose spec holds `blob` (cut out and
    /// sent apart), run to the end on the one worker; the result stays held, and with
    /// it the group's blob. Checks after the batch that the worker's cache is what the
    /// scheduler records and within the bounds, and that the spec came back whole.
    fn run_one(&mut self, name: &str, blob: &[u8]) {
        let k = [key(name)];
        let spec = [[&b"\x80"[..], blob, b"!"].concat()];
        let (n, kb, payload) = encode(&k, &spec, &[blob]);
        let (tasks, table) = decode_update_graph(&payload, n, kb).unwrap();
        let graph = submission(tasks, table);
        self.s.update_graph(self.c, graph, 0.0).unwrap();
        let done = run_all(&mut self.s, self.w, &mut self.sent, &mut self.cache);
        assert_eq!(done, vec![(k[0].clone(), spec[0].clone())]);
        let cache = &self.cache;
        let bytes: usize = cache.blobs.values().map(Vec::len).sum();
        assert_eq!(cache.blobs.len(), self.sent[&self.w].len());
        assert!(cache.blobs.len() <= MAX_HELD_BLOBS, "{}", cache.blobs.len());
        assert!(bytes <= MAX_HELD_BLOB_BYTES, "{bytes}");
    }
}

/// A blob unique to group `j`, `len` bytes long.
fn nth_blob(j: usize, len: usize) -> Vec<u8> {
    let mut b = format!("<function {j}>").into_bytes();
    b.resize(len, b'.');
    b
}

#[test]
fn a_worker_holds_at_most_max_held_blobs_and_is_sent_an_evicted_blob_again() {
    let mut rig = Rig::new(scheduler_validating(false));
    let groups = MAX_HELD_BLOBS + 50;
    for j in 0..groups {
        rig.run_one(&format!("g{j}-a"), &nth_blob(j, 64));
    }
    // Every group still holds its blob: the least recently used went, the rest stayed.
    let cache = &rig.cache;
    assert_eq!((cache.added, cache.blobs.len()), (groups, MAX_HELD_BLOBS));
    let held: Vec<&Vec<u8>> = cache.blobs.values().collect();
    assert!(!held.contains(&&nth_blob(0, 64)));
    assert!(held.contains(&&nth_blob(groups - 1, 64)));
    // A new task of the first group needs its blob again: it is sent again, under a new
    // id, and another goes.
    rig.run_one("g0-b", &nth_blob(0, 64));
    let cache = &rig.cache;
    assert_eq!(
        (cache.added, cache.blobs.len()),
        (groups + 1, MAX_HELD_BLOBS)
    );
    // The recently used one stays when the next blob arrives.
    rig.run_one("gnew-a", &nth_blob(groups, 64));
    assert!(rig.cache.blobs.values().any(|b| *b == nth_blob(0, 64)));
    rig.s.validate().unwrap();
}

#[test]
fn a_worker_holds_at_most_max_held_blob_bytes() {
    let mut rig = Rig::new(scheduler());
    let len = 4 << 20;
    let fit = MAX_HELD_BLOB_BYTES / len;
    for j in 0..fit + 3 {
        rig.run_one(&format!("g{j}-a"), &nth_blob(j, len));
    }
    assert_eq!((rig.cache.added, rig.cache.blobs.len()), (fit + 3, fit));
    rig.run_one("g0-b", &nth_blob(0, len));
    assert_eq!((rig.cache.added, rig.cache.blobs.len()), (fit + 4, fit));
}
