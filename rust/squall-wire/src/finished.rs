//! The `finished` message (docs/protocol.md#finished): a worker's batch of completion
//! reports as four packed arrays one after the other. squall-worker encodes it and the
//! binding decodes it for the scheduler; this module needs nothing of squall-core, so
//! squall-worker uses it without the `scheduler` feature.

use crate::error::{WireError, WireResult};
use crate::packed;

/// Completion reports, one per index of the four arrays (always of equal lengths).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FinishedBatch {
    pub tasks: Vec<u32>,
    pub run_ids: Vec<u64>,
    pub nbytes: Vec<i64>,
    /// Compute seconds.
    pub seconds: Vec<f64>,
}

/// Bytes per report: a u32 task id, a u64 run id, i64 nbytes and f64 seconds.
pub const REPORT_SIZE: usize = 4 + 8 + 8 + 8;

impl FinishedBatch {
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    pub fn push(&mut self, task: u32, run_id: u64, nbytes: i64, seconds: f64) {
        self.tasks.push(task);
        self.run_ids.push(run_id);
        self.nbytes.push(nbytes);
        self.seconds.push(seconds);
    }

    /// `u32 tasks[n] | u64 run_ids[n] | i64 nbytes[n] | f64 seconds[n]`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() * REPORT_SIZE);
        self.tasks.iter().for_each(|&x| packed::put(&mut out, x));
        self.run_ids.iter().for_each(|&x| packed::put(&mut out, x));
        self.nbytes.iter().for_each(|&x| packed::put(&mut out, x));
        self.seconds.iter().for_each(|&x| packed::put(&mut out, x));
        out
    }

    /// The `n` reports of a payload (`n` from the message header), which must be
    /// exactly `n` reports long.
    pub fn decode(n: usize, b: &[u8]) -> WireResult<Self> {
        let left = b.len();
        let need = n
            .checked_mul(REPORT_SIZE)
            .filter(|&need| need <= left)
            .ok_or(WireError::CountTooLarge {
                what: "finished reports",
                count: n,
                left,
            })?;
        if left > need {
            return Err(WireError::Trailing(left - need));
        }
        let (tasks, rest) = b.split_at(4 * n);
        let (run_ids, rest) = rest.split_at(8 * n);
        let (nbytes, seconds) = rest.split_at(8 * n);
        Ok(Self {
            tasks: packed::decode(tasks, "tasks")?,
            run_ids: packed::decode(run_ids, "run_ids")?,
            nbytes: packed::decode(nbytes, "nbytes")?,
            seconds: packed::decode(seconds, "seconds")?,
        })
    }
}
