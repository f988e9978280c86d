//! Call specs (docs/protocol.md#run-specs), the run specs of `submit` and `map`:
//! `0x01 | u32 function length | cloudpickled function | pickle((args, kwargs))`. The
//! function's bytes come first and alone so that the specs of a `map` share them and a
//! worker can look the function up by them. Any other spec (a pickle, which starts with
//! 0x80) is not a call spec.

use crate::error::{WireError, WireResult};

/// First byte of a call spec.
pub const CALL_TAG: u8 = 1;

/// The parts of a call spec, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallSpec<'a> {
    /// The cloudpickled function.
    pub function: &'a [u8],
    /// `pickle((args, kwargs))`.
    pub call: &'a [u8],
}

/// The part of a call spec naming the function, shared by the specs of a `map`: the
/// spec is this prefix followed by the pickled call.
pub fn call_prefix(function: &[u8]) -> WireResult<Vec<u8>> {
    let n = u32::try_from(function.len()).map_err(|_| WireError::CountTooLarge {
        what: "function bytes",
        count: function.len(),
        left: u32::MAX as usize,
    })?;
    let mut out = Vec::with_capacity(5 + function.len());
    out.push(CALL_TAG);
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(function);
    Ok(out)
}

/// A call spec's parts; None for a spec of another kind.
pub fn split_call(spec: &[u8]) -> WireResult<Option<CallSpec<'_>>> {
    let Some((&CALL_TAG, rest)) = spec.split_first() else {
        return Ok(None);
    };
    let truncated = |needed| WireError::Truncated {
        what: "call spec",
        needed,
        left: rest.len(),
    };
    let (len, rest) = rest.split_first_chunk::<4>().ok_or(truncated(4))?;
    let n = u32::from_le_bytes(*len) as usize;
    if n > rest.len() {
        return Err(WireError::Truncated {
            what: "call spec function",
            needed: n,
            left: rest.len(),
        });
    }
    let (function, call) = rest.split_at(n);
    Ok(Some(CallSpec { function, call }))
}
