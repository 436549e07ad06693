//! Release receipts waiting to be deleted.
//!
//! A release leaves a receipt key, `redisson_unlock_latch:{name}:<request id>`, so that a
//! retried request gets the answer of the first; once the answer has arrived the receipt serves
//! nothing. Releases queue their receipt here ([`Watchdog::discard_receipt`]) and the watchdog
//! thread deletes the queued keys in the pipeline of its next renewal batch, or alone once
//! the first key has waited one renewal interval, or sooner when more than
//! [`EARLY_FLUSH_ABOVE`] are queued. A receipt that is not deleted still expires by its TTL.
//!
//! The queue sits behind its own lock, apart from the watchdog state, so that queuing is a
//! push under a lock held only for pushes and for swapping the keys out. Plain data: no I/O,
//! no waking (what [`ReceiptQueue::push`] answers tells the caller whether the thread may need
//! it), and the clock is read only for the first key of an empty queue.
//!
//! [`Watchdog::discard_receipt`]: super::Watchdog::discard_receipt

use std::time::{Duration, Instant};

/// More queued keys than this are deleted without waiting for their time.
pub(super) const EARLY_FLUSH_ABOVE: usize = 10_000;

pub(super) struct ReceiptQueue {
    keys: Vec<String>,
    /// When the queued keys go out at the latest: one renewal interval after the first.
    flush_by: Option<Instant>,
    /// How long a key may wait for a renewal batch to go out with.
    max_wait: Duration,
}

/// What queuing a key changed for the watchdog thread.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Queued {
    /// The first key of an empty queue: the keys must go out by `flush_by`.
    First { flush_by: Instant },
    /// The queue just passed [`EARLY_FLUSH_ABOVE`]: the keys should go out now.
    Overflowing,
    /// Nothing the thread does not know of already.
    Joined,
}

impl ReceiptQueue {
    pub(super) fn new(max_wait: Duration) -> Self {
        ReceiptQueue {
            keys: Vec::new(),
            flush_by: None,
            max_wait,
        }
    }

    /// Queues `key`; `now` is called for the first key of an empty queue only.
    pub(super) fn push(&mut self, key: String, now: impl FnOnce() -> Instant) -> Queued {
        self.keys.push(key);
        if self.keys.len() == 1 {
            let flush_by = now() + self.max_wait;
            self.flush_by = Some(flush_by);
            return Queued::First { flush_by };
        }
        if self.keys.len() == EARLY_FLUSH_ABOVE + 1 {
            return Queued::Overflowing;
        }
        Queued::Joined
    }

    /// Whether the keys must go out at `now` even without a renewal batch.
    pub(super) fn is_due(&self, now: Instant) -> bool {
        self.keys.len() > EARLY_FLUSH_ABOVE || self.flush_by.is_some_and(|at| at <= now)
    }

    /// When the keys must go out at the latest, if any are queued.
    pub(super) fn flush_by(&self) -> Option<Instant> {
        self.flush_by
    }

    /// Takes every queued key, leaving the queue empty.
    pub(super) fn take(&mut self) -> Vec<String> {
        self.flush_by = None;
        std::mem::take(&mut self.keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_millis(500);

    #[test]
    fn the_first_key_sets_the_time_and_later_ones_do_not_read_the_clock() {
        let start = Instant::now();
        let mut queue = ReceiptQueue::new(INTERVAL);
        assert_eq!(queue.flush_by(), None);
        assert!(!queue.is_due(start));
        assert_eq!(
            queue.push("a".into(), || start),
            Queued::First {
                flush_by: start + INTERVAL
            }
        );
        let no_clock = || panic!("the clock is read for the first key only");
        assert_eq!(queue.push("b".into(), no_clock), Queued::Joined);
        assert_eq!(queue.flush_by(), Some(start + INTERVAL));
        assert!(!queue.is_due(start + INTERVAL - Duration::from_millis(1)));
        assert!(queue.is_due(start + INTERVAL));
    }

    #[test]
    fn taking_the_keys_empties_the_queue_and_the_next_key_starts_over() {
        let start = Instant::now();
        let mut queue = ReceiptQueue::new(INTERVAL);
        queue.push("a".into(), || start);
        queue.push("b".into(), || start);
        assert_eq!(queue.take(), ["a", "b"]);
        assert_eq!(queue.flush_by(), None);
        assert!(!queue.is_due(start + INTERVAL * 2));
        assert!(queue.take().is_empty());
        let later = start + INTERVAL * 3;
        assert_eq!(
            queue.push("c".into(), || later),
            Queued::First {
                flush_by: later + INTERVAL
            }
        );
    }

    #[test]
    fn passing_the_limit_asks_for_an_early_flush_once() {
        let start = Instant::now();
        let mut queue = ReceiptQueue::new(INTERVAL);
        let answers: Vec<Queued> = (0..EARLY_FLUSH_ABOVE + 5)
            .map(|i| queue.push(format!("key:{i}"), || start))
            .collect();
        assert_eq!(
            answers[0],
            Queued::First {
                flush_by: start + INTERVAL
            }
        );
        assert!(answers[1..EARLY_FLUSH_ABOVE]
            .iter()
            .all(|answer| *answer == Queued::Joined));
        assert_eq!(answers[EARLY_FLUSH_ABOVE], Queued::Overflowing);
        assert!(answers[EARLY_FLUSH_ABOVE + 1..]
            .iter()
            .all(|answer| *answer == Queued::Joined));
        assert!(queue.is_due(start), "due at once, before its time");
        assert_eq!(queue.take().len(), EARLY_FLUSH_ABOVE + 5);
    }
}
