use super::*;
use hashbrown::HashSet;
use proptest::prelude::*;

/// How many of `n` runs share their place (`hash >> 4`, in a table of `groups` runs
/// of sixteen) with an earlier one, and how many a uniform hash gives:
/// `n - groups * (1 - e^(-n / groups))`.
fn run_collisions(hashes: impl Iterator<Item = u64>, groups: u64) -> (usize, f64) {
    let mut places = HashSet::new();
    let mut n = 0;
    for h in hashes {
        places.insert((h >> 4) & (groups - 1));
        n += 1;
    }
    let uniform = n as f64 - groups as f64 * (1.0 - (-(n as f64) / groups as f64).exp());
    (n - places.len(), uniform)
}

/// How many of `n` entries share their home bucket with an earlier one in a table of
/// `buckets`, and how many a uniform hash gives.
fn home_collisions(hashes: impl Iterator<Item = u64>, buckets: u64) -> (usize, f64) {
    run_collisions(hashes.map(|h| h << 4), buckets)
}

/// Item `i` of a map's keys, as the core encodes a str key.
fn map_key(i: u64) -> Vec<u8> {
    format!("S\x25inc-0123456789abcdef01234567{i:08x}").into_bytes()
}

/// A key `(name, i, last)` encoded as the core does: ints as zigzag varints.
fn tuple_key(i: i64, last: i64) -> Vec<u8> {
    let mut b = b"T\x03S\x01x".to_vec();
    for v in [i, last] {
        b.push(b'I');
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            b.push(z as u8 | 0x80);
            z >>= 7;
        }
        b.push(z as u8);
    }
    b
}

fn run_of(h: u64) -> u64 {
    h & !0xF & !TOP
}

#[test]
fn a_run_of_sixteen_neighbours_fills_one_run_of_places() {
    for j in [0u64, 1, 77, 1 << 20] {
        let runs: [Vec<u64>; 4] = [
            (16 * j..16 * j + 16)
                .map(|i| neighbour_hash(&map_key(i)))
                .collect(),
            (16 * j..16 * j + 16).map(|i| id_hash(i as u32)).collect(),
            (16 * j..16 * j + 16)
                .map(|i| neighbour_hash(&tuple_key(7, i as i64)))
                .collect(),
            (16 * j..16 * j + 16)
                .map(|i| neighbour_hash(&tuple_key(7, -(i as i64) - 1)))
                .collect(),
        ];
        for (what, hashes) in runs.iter().enumerate() {
            assert!(
                hashes.iter().all(|&h| run_of(h) == run_of(hashes[0])),
                "case {what}, run {j}: an item left the run"
            );
            let places: HashSet<u64> = hashes.iter().map(|h| h & 0xF).collect();
            assert_eq!(
                places.len(),
                16,
                "case {what}: each neighbour has a place of its own"
            );
            let tops: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
            assert_eq!(
                tops.len(),
                16,
                "case {what}: neighbours differ in the bits compared first"
            );
        }
    }
}

#[test]
fn runs_spread_like_a_uniform_hash() {
    // 62,500 runs in 2^17 places (a million entries at load 0.48): one key or id per
    // run, as the first of sixteen neighbours, or ids as a worker among 32 sees them
    // (strided), or at a large power of two.
    let groups = 1 << 17;
    let runs = 62_500u32;
    let cases = [
        (
            "keys",
            run_collisions(
                (0..runs).map(|j| neighbour_hash(&map_key(16 * u64::from(j)))),
                groups,
            ),
        ),
        (
            "tuples",
            run_collisions(
                (0..runs).map(|j| neighbour_hash(&tuple_key(3, 16 * i64::from(j)))),
                groups,
            ),
        ),
        (
            "ids",
            run_collisions((0..runs).map(|j| id_hash(16 * j)), groups),
        ),
        (
            "strided",
            run_collisions((0..runs).map(|j| id_hash(32 * j + 5)), groups),
        ),
        (
            "wide",
            run_collisions((0..runs).map(|j| id_hash(j.wrapping_mul(4096))), groups),
        ),
    ];
    for (what, (got, uniform)) in cases {
        assert!(
            (got as f64) < uniform * 1.1 + 50.0,
            "{what}: {got} runs share a place, a uniform hash gives {uniform:.0}"
        );
    }
}

#[test]
fn keys_that_are_not_neighbours_spread_like_a_uniform_hash() {
    // A million keys all ending in `)` (no index), tuple keys all ending in the same
    // int, str keys all ending in the same hex digit, and ids strided by 16 (one per
    // run, all with the same low bits), in 2^21 buckets.
    let buckets = 1 << 21;
    let cases = [
        (
            "str",
            home_collisions(
                (0..1_000_000).map(|i| neighbour_hash(format!("S('x', {i})").as_bytes())),
                buckets,
            ),
        ),
        (
            "tuple",
            home_collisions(
                (0..1_000_000).map(|i| neighbour_hash(&tuple_key(i, 7))),
                buckets,
            ),
        ),
        (
            "digit",
            home_collisions(
                (0..1_000_000).map(|i| neighbour_hash(&map_key(16 * i + 3))),
                buckets,
            ),
        ),
        (
            "ids",
            home_collisions((0..1_000_000u32).map(|i| id_hash(16 * i + 3)), buckets),
        ),
    ];
    for (what, (got, uniform)) in cases {
        assert!(
            (got as f64) < uniform * 1.05,
            "{what}: {got} entries share a home bucket, a uniform hash gives {uniform:.0}"
        );
    }
}

#[test]
fn id_hasher_hashes_as_id_hash() {
    assert_eq!(BuildIdHasher.hash_one(12345u32), id_hash(12345));
}

/// What names a key's run: all but its index, and the index's high bits.
fn run_name(key: &[u8]) -> (Vec<u8>, Option<u64>) {
    match split_index(key) {
        Some((rest, i)) => (rest.to_vec(), Some(i >> 4)),
        None => (key.to_vec(), None),
    }
}

proptest! {
    #[test]
    fn keys_that_are_not_neighbours_rarely_share_a_run(
        a in proptest::collection::vec(any::<u8>(), 1..40),
        b in proptest::collection::vec(any::<u8>(), 1..40),
    ) {
        prop_assume!(run_name(&a) != run_name(&b));
        // 53 bits of run: a shared run is a 2^-53 event, never in a test run.
        prop_assert_ne!(run_of(neighbour_hash(&a)), run_of(neighbour_hash(&b)));
    }

    #[test]
    fn a_tuple_keys_last_int_is_read_back(name in "[a-z]{0,8}", i in any::<i64>(), last in any::<i64>()) {
        let mut key = tuple_key(i, last);
        key.splice(4..5, name.bytes());
        key[3] = name.len() as u8;
        let (_, index) = split_index(&key).expect("ends with an int");
        prop_assert_eq!(index, last as u64);
    }
}
