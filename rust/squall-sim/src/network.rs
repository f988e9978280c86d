//! Worker-to-worker transfers: each worker's inbound link moves one dependency at a
//! time at `bandwidth`, and every transfer pays `latency` on top.

use crate::worker::FxIndexMap;

#[derive(Clone, Copy)]
pub(crate) struct Transfer {
    pub src: usize,
    pub dst: usize,
    pub dep: usize,
    pub bytes: u64,
    pub start: f64,
}

pub(crate) struct Network {
    bandwidth: f64,
    latency: f64,
    in_flight: FxIndexMap<u64, Transfer>,
    pub bytes: u64,
    pub count: u64,
}

impl Network {
    pub fn new(bandwidth: f64, latency: f64) -> Self {
        Network {
            bandwidth,
            latency,
            in_flight: Default::default(),
            bytes: 0,
            count: 0,
        }
    }

    /// Queues a transfer behind the receiver's earlier ones; returns its arrival time.
    pub fn send(&mut self, id: u64, t: Transfer, inbound_free_at: &mut f64) -> f64 {
        let begin = inbound_free_at.max(t.start);
        *inbound_free_at = begin + t.bytes as f64 / self.bandwidth;
        self.in_flight.insert(id, t);
        *inbound_free_at + self.latency
    }

    /// The transfer arrived (None if it was aborted meanwhile).
    pub fn arrive(&mut self, id: u64) -> Option<Transfer> {
        let t = self.in_flight.swap_remove(&id)?;
        self.bytes += t.bytes;
        self.count += 1;
        Some(t)
    }

    /// Aborts every transfer from or to a dead worker; returns those it was sending.
    pub fn worker_died(&mut self, w: usize) -> Vec<Transfer> {
        let mut failed = Vec::new();
        self.in_flight.retain(|_, t| {
            if t.src == w && t.dst != w {
                failed.push(*t);
            }
            t.src != w && t.dst != w
        });
        failed
    }
}
