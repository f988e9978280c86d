//! The `finished` codec: round trips, every truncation or extension is an error, and no
//! input makes the decoder panic (without the `scheduler` feature too).

use crate::finished::{FinishedBatch, REPORT_SIZE};
use crate::WireError;
use proptest::prelude::*;

fn sample() -> FinishedBatch {
    let mut f = FinishedBatch::default();
    f.push(7, 3, 1 << 40, 0.25);
    f.push(u32::MAX, u64::MAX, -1, 1e9);
    f
}

#[test]
fn the_layout_is_the_four_arrays_in_turn() {
    let b = sample().encode();
    assert_eq!(b.len(), 2 * REPORT_SIZE);
    assert_eq!(&b[..8], &[7, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(&b[8..16], &3u64.to_le_bytes());
    assert_eq!(&b[24..32], &(1i64 << 40).to_le_bytes());
    assert_eq!(&b[40..48], &0.25f64.to_le_bytes());
    assert!(FinishedBatch::default().encode().is_empty());
    assert_eq!(FinishedBatch::decode(0, &[]), Ok(FinishedBatch::default()));
}

#[test]
fn every_truncation_and_extension_is_an_error() {
    let b = sample().encode();
    for cut in 0..b.len() {
        assert!(FinishedBatch::decode(2, &b[..cut]).is_err(), "{cut} bytes");
    }
    let mut longer = b.clone();
    longer.push(0);
    assert_eq!(
        FinishedBatch::decode(2, &longer),
        Err(WireError::Trailing(1))
    );
    assert_eq!(
        FinishedBatch::decode(1, &b),
        Err(WireError::Trailing(REPORT_SIZE))
    );
    assert!(matches!(
        FinishedBatch::decode(usize::MAX, &b),
        Err(WireError::CountTooLarge { .. })
    ));
}

fn batches() -> impl Strategy<Value = FinishedBatch> {
    prop::collection::vec(
        (any::<u32>(), any::<u64>(), any::<i64>(), any::<f64>()),
        0..64,
    )
    .prop_map(|reports| {
        let mut f = FinishedBatch::default();
        for (t, r, n, s) in reports {
            f.push(t, r, n, s);
        }
        f
    })
}

proptest! {
    #[test]
    fn arbitrary_batches_round_trip(f in batches()) {
        let back = FinishedBatch::decode(f.len(), &f.encode()).unwrap();
        // Compared bitwise: NaN seconds round-trip too.
        let bits = |f: &FinishedBatch| f.seconds.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!((&back.tasks, &back.run_ids, &back.nbytes), (&f.tasks, &f.run_ids, &f.nbytes));
        prop_assert_eq!(bits(&back), bits(&f));
    }

    #[test]
    fn random_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..256), n in 0usize..16) {
        let _ = FinishedBatch::decode(n, &b);
    }
}
