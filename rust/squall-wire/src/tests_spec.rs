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
