//! Call specs: round trips, every truncation is an error, other specs are not calls,
//! and no input makes the decoder panic.

use crate::spec::{call_prefix, split_call, CallSpec, CALL_TAG};
use proptest::prelude::*;

#[test]
fn a_spec_is_the_prefix_then_the_call() {
    let spec = [call_prefix(b"fn").unwrap(), b"args".to_vec()].concat();
    assert_eq!(spec, b"\x01\x02\x00\x00\x00fnargs");
    let parts = CallSpec {
        function: b"fn",
        call: b"args",
    };
    assert_eq!(split_call(&spec), Ok(Some(parts)));
}

#[test]
fn other_specs_are_not_calls_and_truncated_calls_are_errors() {
    assert_eq!(split_call(b""), Ok(None));
    assert_eq!(split_call(b"\x80\x05pickle"), Ok(None));
    let spec = [call_prefix(b"function").unwrap(), b"call".to_vec()].concat();
    for cut in 1..5 + 8 {
        assert!(split_call(&spec[..cut]).is_err(), "{cut} bytes");
    }
    assert_eq!(split_call(&spec[..13]).unwrap().unwrap().call, b"");
}

proptest! {
    #[test]
    fn arbitrary_calls_round_trip(
        function in prop::collection::vec(any::<u8>(), 0..64),
        call in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let spec = [call_prefix(&function).unwrap(), call.clone()].concat();
        prop_assert_eq!(spec[0], CALL_TAG);
        let parts = split_call(&spec).unwrap().unwrap();
        prop_assert_eq!((parts.function, parts.call), (&function[..], &call[..]));
    }

    #[test]
    fn random_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = split_call(&b);
    }
}

// The expected bytes are what CPython's `pickle.dumps((args, {}), protocol=5)` writes
// (tests/test_map_specs.py checks the binding against the pickler itself).
mod plain_pickle {
    use crate::plain_pickle::{read_call, write_call, Arg, Plain};
    use proptest::prelude::*;

    fn call(args: &[Plain<'_>], same: &[Option<usize>]) -> Vec<u8> {
        let mut out = b"prefix".to_vec();
        assert!(write_call(&mut out, args, same));
        out.split_off(6)
    }

    #[test]
    fn small_calls_match_the_pickler() {
        assert_eq!(
            call(&[Plain::Int(1)], &[None]),
            b"\x80\x05\x95\t\x00\x00\x00\x00\x00\x00\x00K\x01\x85\x94}\x94\x86\x94."
        );
        let args = [
            Plain::Int(300),
            Plain::Str("ab"),
            Plain::Bytes(b"x"),
            Plain::None,
            Plain::Bool(true),
            Plain::Float(1.5),
        ];
        assert_eq!(
            call(&args, &[None; 6]),
            b"\x80\x05\x95\x1f\x00\x00\x00\x00\x00\x00\x00(M,\x01\x8c\x02ab\x94C\x01x\x94N\x88G?\xf8\x00\x00\x00\x00\x00\x00t\x94}\x94\x86\x94."
        );
    }

    #[test]
    fn integers_take_the_pickler_s_shortest_form() {
        let args = [-5, 1 << 40, -(1 << 40), -129, -128, 1 << 31, -(1 << 31) - 1].map(Plain::Int);
        assert_eq!(
            call(&args, &[None; 7]),
            b"\x80\x05\x955\x00\x00\x00\x00\x00\x00\x00(J\xfb\xff\xff\xff\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x06\x00\x00\x00\x00\x00\xffJ\x7f\xff\xff\xffJ\x80\xff\xff\xff\x8a\x05\x00\x00\x00\x80\x00\x8a\x05\xff\xff\xff\x7f\xfft\x94}\x94\x86\x94."
        );
        let min = call(&[Plain::Int(i64::MIN)], &[None]);
        assert_eq!(&min[11..21], b"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80");
    }

    #[test]
    fn the_same_string_twice_is_a_reference_back() {
        assert_eq!(
            call(&[Plain::Str("x"), Plain::Str("x")], &[None, Some(0)]),
            b"\x80\x05\x95\r\x00\x00\x00\x00\x00\x00\x00\x8c\x01x\x94h\x00\x86\x94}\x94\x86\x94."
        );
    }

    #[test]
    fn a_call_past_one_frame_is_left_to_the_pickler() {
        let big = vec![b'a'; 70_000];
        let mut out = b"keep".to_vec();
        assert!(!write_call(&mut out, &[Plain::Bytes(&big)], &[None]));
        assert_eq!(out, b"keep");
    }

    /// The arguments [`read_call`] hands over, None if it refuses the call.
    fn read(b: &[u8]) -> Option<Vec<Arg<'_>>> {
        let mut args = Vec::new();
        read_call(b, |a| args.push(a)).then_some(args)
    }

    #[test]
    fn calls_read_back_and_other_pickles_are_left_to_the_unpickler() {
        let (e, long) = (Plain::Str("é"), Plain::Int(-1 << 40));
        let b = call(&[e, long, e, Plain::None], &[None, None, Some(0), None]);
        let want = [
            Arg::Value(e),
            Arg::Value(long),
            Arg::Same(0),
            Arg::Value(Plain::None),
        ];
        assert_eq!(read(&b).unwrap(), want);
        // Equal strings that are not one object stay two.
        let x = Plain::Str("x");
        let twice = call(&[x, x], &[None, None]);
        assert_eq!(read(&twice).unwrap(), [Arg::Value(x); 2]);
        // No arguments; many (a marked tuple).
        assert_eq!(read(&call(&[], &[])).unwrap(), []);
        let five = [Plain::Int(1); 5];
        assert_eq!(
            read(&call(&five, &[None; 5])).unwrap(),
            [Arg::Value(Plain::Int(1)); 5]
        );
        // A longer form than the pickler's still means the same int.
        let wide = b"\x80\x05\x95\x0a\x00\x00\x00\x00\x00\x00\x00M\x01\x00\x85\x94}\x94\x86\x94.";
        assert_eq!(read(wide).unwrap(), [Arg::Value(Plain::Int(1))]);
        // A wrong frame length, a trailing byte, a tuple of the wrong size, kwargs, no
        // frame, a reference to an entry not made, surrogates (not UTF-8).
        let one = call(&[Plain::Int(1)], &[None]);
        let mut bad = one.clone();
        bad[3] += 1;
        let mut trailing = one.clone();
        trailing.push(b'.');
        let mut pair = one.clone();
        pair[13] = 0x86; // TUPLE2 of one argument
        let kwargs =
            b"\x80\x05\x95\x0f\x00\x00\x00\x00\x00\x00\x00K\x01\x85\x94}\x94(K\x01K\x02u\x86\x94.";
        let unframed = b"\x80\x05K\x01\x85\x94}\x94\x86\x94.";
        let dangling = b"\x80\x05\x95\x09\x00\x00\x00\x00\x00\x00\x00h\x00\x85\x94}\x94\x86\x94.";
        let surrogate = b"\x80\x05\x95\x0d\x00\x00\x00\x00\x00\x00\x00\x8c\x03\xed\xa0\x80\x94\x85\x94}\x94\x86\x94.";
        for b in [
            &bad[..],
            &trailing,
            &pair,
            kwargs,
            unframed,
            dangling,
            surrogate,
        ] {
            assert_eq!(read(b), None, "{b:?}");
        }
    }

    fn plain() -> impl Strategy<Value = (u8, i64, f64, String, Vec<u8>)> {
        (
            0u8..6,
            any::<i64>(),
            any::<f64>(),
            ".{0,300}",
            prop::collection::vec(any::<u8>(), 0..300),
        )
    }

    proptest! {
        #[test]
        fn written_calls_read_back(items in prop::collection::vec((plain(), prop::option::of(0usize..8)), 0..8)) {
            let args: Vec<Plain<'_>> = items.iter().map(|((kind, i, f, s, b), _)| match kind {
                0 => Plain::None,
                1 => Plain::Bool(*i % 2 == 0),
                2 => Plain::Int(*i),
                3 => Plain::Float(*f),
                4 => Plain::Str(s),
                _ => Plain::Bytes(b),
            }).collect();
            // An argument repeats an earlier one it equals (as the same object).
            let same: Vec<Option<usize>> = items.iter().enumerate().map(|(i, (_, j))| {
                j.filter(|&j| j < i && args[j] == args[i] && matches!(args[i], Plain::Str(_) | Plain::Bytes(_)))
            }).collect();
            let b = call(&args, &same);
            let read = read(&b).unwrap();
            prop_assert_eq!(read.len(), args.len());
            // The first of the same objects: where a repeat points, whichever it names.
            let first = |mut j: usize| { while let Some(k) = same[j] { j = k; } j };
            for (i, got) in read.iter().enumerate() {
                match (*got, args[i]) {
                    (Arg::Same(j), _) => prop_assert_eq!(Some(first(j)), same[i].map(first)),
                    (Arg::Value(Plain::Float(x)), Plain::Float(y)) => prop_assert_eq!(x.to_bits(), y.to_bits()),
                    (Arg::Value(x), y) => { prop_assert_eq!(x, y); prop_assert_eq!(same[i], None); }
                }
            }
        }

        #[test]
        fn random_calls_never_panic(b in prop::collection::vec(any::<u8>(), 0..48)) {
            let _ = read(&[&b"\x80\x05\x95"[..], &(b.len() as u64).to_le_bytes(), &b].concat());
            let _ = read(&b);
        }
    }
}
