//! A decimating sample of a stream of events, for the task stream (docs/runtime.md#task-stream).
//!
//! It keeps every `stride`-th event. When the buffer fills, every other kept event is
//! dropped and the stride doubles, so the events kept between two drains are spread
//! evenly over the whole interval and never exceed the capacity; while fewer events than
//! the capacity arrive between drains, every one is kept. A drain resets the stride.
//!
//! Asking whether an event is wanted costs one increment and one compare: the caller
//! builds the sample only when it is.

/// Kept events of one interval, and how many events they stand for.
#[derive(Debug)]
pub struct Sampler<T> {
    capacity: usize,
    /// Keep every `stride`-th event.
    stride: u64,
    /// Events seen since the last drain.
    seen: u64,
    /// The `seen` count of the next event to keep.
    next: u64,
    kept: Vec<T>,
}

impl<T> Sampler<T> {
    /// A sampler keeping at most `capacity` events per drain (rounded up to an even
    /// number, at least 2, so that halving keeps the stride's phase). 0 keeps none.
    pub fn new(capacity: usize) -> Self {
        let capacity = if capacity == 0 {
            0
        } else {
            capacity.max(2).next_multiple_of(2)
        };
        Self {
            capacity,
            stride: 1,
            seen: 0,
            next: if capacity == 0 { u64::MAX } else { 1 },
            kept: Vec::new(),
        }
    }

    /// Counts an event; true if the caller should `keep` it.
    #[inline]
    pub fn wants(&mut self) -> bool {
        self.seen += 1;
        self.seen == self.next
    }

    /// Keeps the event `wants` asked for.
    pub fn keep(&mut self, event: T) {
        self.kept.push(event);
        self.next += self.stride;
        if self.kept.len() >= self.capacity {
            // Events kept are at `next - stride * (len - i)`; keep the even positions,
            // whose spacing is the doubled stride, and whose successor is `next` still.
            let mut i = 0;
            self.kept.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride *= 2;
        }
    }

    /// The events kept since the last drain, oldest first, and how many events were
    /// seen meanwhile (each kept one stands for about `seen / kept` of them).
    pub fn drain(&mut self) -> (Vec<T>, u64) {
        let seen = std::mem::replace(&mut self.seen, 0);
        self.stride = 1;
        self.next = if self.capacity == 0 { u64::MAX } else { 1 };
        (std::mem::take(&mut self.kept), seen)
    }

    /// Events seen since the last drain.
    pub fn seen(&self) -> u64 {
        self.seen
    }
}

#[cfg(test)]
mod tests {
    use super::Sampler;

    fn run(capacity: usize, n: u64) -> (Vec<u64>, u64) {
        let mut s = Sampler::new(capacity);
        for i in 0..n {
            if s.wants() {
                s.keep(i);
            }
        }
        s.drain()
    }

    #[test]
    fn below_capacity_every_event_is_kept() {
        let (kept, seen) = run(8, 7);
        assert_eq!(kept, (0..7).collect::<Vec<_>>());
        assert_eq!(seen, 7);
    }

    #[test]
    fn above_capacity_kept_events_are_evenly_spaced_over_the_interval() {
        for n in [8, 9, 100, 1000, 12_345] {
            let (kept, seen) = run(8, n);
            assert_eq!(seen, n);
            assert!(kept.len() <= 8 && kept.len() >= 4, "{n}: {kept:?}");
            let gaps: Vec<u64> = kept.windows(2).map(|w| w[1] - w[0]).collect();
            assert!(gaps.iter().all(|&g| g == gaps[0]), "{n}: {kept:?}");
            assert_eq!(kept[0], 0);
            // The last kept event is within one stride of the end: the whole interval.
            assert!(n - kept[kept.len() - 1] <= gaps[0], "{n}: {kept:?}");
        }
    }

    #[test]
    fn drain_resets_the_stride() {
        let mut s = Sampler::new(4);
        for i in 0..100u64 {
            if s.wants() {
                s.keep(i);
            }
        }
        assert_eq!(s.seen(), 100);
        let (_, seen) = s.drain();
        assert_eq!(seen, 100);
        for i in 0..3u64 {
            assert!(s.wants());
            s.keep(i);
        }
        assert_eq!(s.drain(), (vec![0, 1, 2], 3));
        assert_eq!(s.drain(), (vec![], 0));
    }

    #[test]
    fn capacity_zero_keeps_nothing_but_counts() {
        let (kept, seen) = run(0, 50);
        assert!(kept.is_empty());
        assert_eq!(seen, 50);
    }

    #[test]
    fn odd_capacity_rounds_up() {
        let (kept, _) = run(3, 1000);
        assert!(kept.len() <= 4);
        let (kept, seen) = run(1, 3);
        assert_eq!((kept, seen), (vec![0], 3));
    }
}
