//! What a manager's primitives have been doing: the public [`Stats`] snapshot, and the
//! [`WaitRecorder`] the wait loop writes into.
//!
//! Each part keeps its own counters where the work happens, as plain atomics: the wait loop
//! (waiting threads, acquisitions, wait times), the watchdog (renewals, losses), the client
//! (releases short of replica acknowledgements), the cleanup thread (undos sent again), the
//! pub/sub service (connections). [`LockManager::stats`](crate::LockManager::stats) reads
//! them into one snapshot without I/O. No lock is taken on a hot path but one: a wait that
//! slept takes the top list's, once, as it ends. Wait times go into a histogram of
//! fixed buckets (eight per power of two, so a percentile is within 12.5 %).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A snapshot of a manager's work since it was built; see
/// [`LockManager::stats`](crate::LockManager::stats). Counts over all its primitives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Holds this process has now that the watchdog renews or watches: locks (each read
    /// level's chain of a thread counts once), permits with a guard.
    pub held: usize,
    /// Threads waiting now in a blocking call (a lock, a permit, a latch).
    pub waiting: usize,
    /// Blocking or trying calls that ended with the primitive taken (a lock, a permit; an
    /// open latch).
    pub acquisitions: u64,
    /// Holds sent for renewal (one per hold per renewal).
    pub renewals_sent: u64,
    /// Of those, the ones that got no usable answer (retried until the lease ends).
    pub renewals_failed: u64,
    /// Renewal batches: one pipeline each, however many holds.
    pub renewal_batches: u64,
    /// With replica acknowledgements (by default, on a master with replicas in sync; see
    /// [`connected_replica_acks`](crate::LockManagerBuilder::connected_replica_acks)): holds
    /// renewed whose
    /// renewal fewer replicas than asked acknowledged in time. They are kept (a lease
    /// extended on the master only is still a lease), and reported in the log.
    pub renewals_unreplicated: u64,
    /// With replica acknowledgements: releases (of locks,
    /// permits, semaphore permits) that fewer replicas than asked acknowledged in time. They
    /// stand, and are reported in the log; a failover now could bring the hold back until
    /// its lease ends.
    pub releases_unreplicated: u64,
    /// Holds found lost because Redis answered they were gone.
    pub lost_not_held_anymore: u64,
    /// Holds found lost because their lease ran out before a renewal came through.
    pub lost_lease_expired: u64,
    /// Holds found lost because someone force-released them.
    pub lost_force_released: u64,
    /// Holds at risk now: a renewal failed and none has succeeded since (see
    /// [`Guard::is_at_risk`](crate::Guard::is_at_risk)).
    pub at_risk: usize,
    /// How many times a hold was raised at risk.
    pub risks_raised: u64,
    /// How many times a hold at risk was renewed again (the rest of those raised were lost,
    /// released, or are at risk now).
    pub risks_cleared: u64,
    /// How many holds of this manager were asked to let go (a revocation request heard for
    /// them, once per hold).
    pub revocations_requested: u64,
    /// Acquisitions handed to this manager's waiting threads inside a release, without
    /// asking Redis again: a plain lock handed on by another thread of the manager, a fair
    /// lock granted by a release in any process.
    pub handoffs: u64,
    /// Undos the manager's cleanup thread is sending now, until Redis answers them: of what
    /// failed or abandoned calls may have left in Redis (a lock level or a fair waiter's
    /// place whose acquisition got no answer, permits a take took, a lock whose dropped
    /// guard could not release it). The undo of an acquisition try counts until it has run
    /// once after the try's deadline (a late copy of the try can come until then: a few
    /// seconds).
    pub cleanup_pending: usize,
    /// Of those, the ones Redis answered: done.
    pub cleanup_done: u64,
    /// Of those, the ones given up: what they undo ran out by itself first (its lease or
    /// place), Redis refused the undo, or the manager was shut down. Each is logged.
    pub cleanup_abandoned: u64,
    /// How many times the pub/sub connection was made again after the first.
    pub pubsub_reconnects: u64,
    /// How long the acquisitions waited, from the call to the take.
    pub wait_times: Percentiles,
    /// How long holds lasted: every hold the watchdog kept, from its grant here to its
    /// release or loss (a thread's chain of reentrant levels of a lock is one hold, its read
    /// levels another; a permit with a guard is one; a group lock counts one per member, on
    /// each member's manager; a chain given back at once, such as a group lock's short of
    /// members, counts too).
    pub hold_times: Percentiles,
    /// How long the watchdog's renewal passes took, from their send to their last answer: on
    /// a cluster one pass renews each node in turn; replica acknowledgements included.
    pub renewal_times: Percentiles,
    /// The names this manager's threads waited for longest, longest first (ten at most):
    /// waits that slept, taken or not, the time riding out an outage included; a leader
    /// observer's waits for a change are not counted. From a bounded list of 128 names, so
    /// that a process with very many names pays for that many: a name new to a full list
    /// replaces the one with the least time, and is ranked with that time added (it may
    /// have been that name's), but reports only its own.
    pub most_waited: Vec<Waited>,
}

/// Percentiles of a set of durations (each within 12.5 % of the exact value): the
/// acquisitions' wait times, the holds' lengths, the renewals' round trips.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Percentiles {
    /// How many durations are counted.
    pub count: u64,
    /// The median.
    pub p50: Duration,
    /// The 90th percentile.
    pub p90: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The longest (its bucket's upper bound).
    pub max: Duration,
}

/// One of the names this manager's threads waited for longest (see [`Stats::most_waited`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waited {
    /// The primitive's name (a group lock's: its members' names).
    pub name: String,
    /// Waits that slept, taken or not (a try that found it free at once does not count).
    pub waits: u64,
    /// Their time together, from each call to its end, since the name was last taken into
    /// the list (a lower bound of all its waits' time).
    pub waited: Duration,
}

/// Sub-buckets per power of two.
const SUB_BUCKETS: u32 = 8;
/// Enough buckets for any duration in microseconds that fits a u64.
const BUCKETS: usize = (SUB_BUCKETS as usize) * 62;
/// How many names the top list of waits tracks (the ones with the least time are replaced
/// first), and how many it reports.
const TRACKED_NAMES: usize = 128;
const REPORTED_NAMES: usize = 10;

/// Durations in fixed buckets (eight per power of two of microseconds), as plain atomics.
pub(crate) struct Histogram {
    buckets: Box<[AtomicU64]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Histogram {
    pub(crate) fn record(&self, duration: Duration) {
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(micros)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn percentiles(&self) -> Percentiles {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|bucket| bucket.load(Ordering::Relaxed))
            .collect();
        let count: u64 = counts.iter().sum();
        if count == 0 {
            return Percentiles::default();
        }
        let percentile = |percent: u64| {
            // The smallest bucket with at least `percent` % of the durations at or below it.
            let rank = (count * percent).div_ceil(100).max(1);
            let mut seen = 0;
            for (bucket, &in_bucket) in counts.iter().enumerate() {
                seen += in_bucket;
                if seen >= rank {
                    return Duration::from_micros(upper_bound(bucket));
                }
            }
            Duration::from_micros(u64::MAX)
        };
        Percentiles {
            count,
            p50: percentile(50),
            p90: percentile(90),
            p99: percentile(99),
            max: percentile(100),
        }
    }
}

/// The names waited for longest, bounded: [`TRACKED_NAMES`] at most, a new name replacing
/// the one with the least time (which it inherits, as the space-saving count does, so that a
/// name's time is never under-counted and one that keeps coming in stays).
#[derive(Default)]
struct TopNames {
    names: HashMap<String, Tracked>,
}

/// A tracked name's waits: its own, and the time it was ranked with on entering the list.
#[derive(Clone, Copy, Default)]
struct Tracked {
    waits: u64,
    waited: Duration,
    inherited: Duration,
}

impl Tracked {
    /// What the name is ranked by: an upper bound of all its waits' time.
    fn rank(&self) -> Duration {
        self.waited + self.inherited
    }
}

impl TopNames {
    fn add(&mut self, name: &str, waited: Duration) {
        if let Some(tracked) = self.names.get_mut(name) {
            tracked.waits += 1;
            tracked.waited += waited;
            return;
        }
        let inherited = match self.names.len() < TRACKED_NAMES {
            true => Duration::ZERO,
            false => self.evict_least(),
        };
        let tracked = Tracked {
            waits: 1,
            waited,
            inherited,
        };
        self.names.insert(name.to_owned(), tracked);
    }

    /// Removes the name ranked lowest; answers its rank.
    fn evict_least(&mut self) -> Duration {
        let least = self
            .names
            .iter()
            .min_by_key(|(_, tracked)| tracked.rank())
            .map(|(name, tracked)| (name.clone(), tracked.rank()));
        match least {
            Some((name, rank)) => {
                self.names.remove(&name);
                rank
            }
            None => Duration::ZERO,
        }
    }

    fn top(&self) -> Vec<Waited> {
        let mut ranked: Vec<(&String, &Tracked)> = self.names.iter().collect();
        ranked.sort_by(|(one, a), (other, b)| b.rank().cmp(&a.rank()).then(one.cmp(other)));
        ranked
            .into_iter()
            .take(REPORTED_NAMES)
            .map(|(name, tracked)| Waited {
                name: name.clone(),
                waits: tracked.waits,
                waited: tracked.waited,
            })
            .collect()
    }
}

/// The wait loop's counters.
pub(crate) struct WaitRecorder {
    waiting: AtomicUsize,
    acquisitions: AtomicU64,
    wait_times: Histogram,
    /// The names of the waits that slept, by their time.
    top: Mutex<TopNames>,
}

impl WaitRecorder {
    pub(crate) fn new() -> Self {
        WaitRecorder {
            waiting: AtomicUsize::new(0),
            acquisitions: AtomicU64::new(0),
            wait_times: Histogram::default(),
            top: Mutex::new(TopNames::default()),
        }
    }

    /// A thread starts waiting for `name` (a wait of `started`; `None`: a wait that is no
    /// contention, kept off the top list); it stops when the returned marker is dropped,
    /// which counts the wait for the name.
    pub(crate) fn start_waiting<'a>(
        &'a self,
        name: Option<&'a str>,
        started: Instant,
    ) -> Waiting<'a> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting {
            recorder: self,
            name,
            started,
        }
    }

    /// An acquisition that waited `waited`.
    pub(crate) fn acquired(&self, waited: Duration) {
        crate::client::telemetry::acquired(waited);
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        self.wait_times.record(waited);
    }

    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    pub(crate) fn acquisitions(&self) -> u64 {
        self.acquisitions.load(Ordering::Relaxed)
    }

    pub(crate) fn wait_times(&self) -> Percentiles {
        self.wait_times.percentiles()
    }

    /// The names waited for longest, longest first.
    pub(crate) fn most_waited(&self) -> Vec<Waited> {
        self.top.lock().top()
    }
}

/// Marks a waiting thread while it lives; counts its wait for its name when dropped.
pub(crate) struct Waiting<'a> {
    recorder: &'a WaitRecorder,
    name: Option<&'a str>,
    started: Instant,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let recorder = self.recorder;
        recorder.waiting.fetch_sub(1, Ordering::Relaxed);
        if let Some(name) = self.name {
            recorder.top.lock().add(name, self.started.elapsed());
        }
    }
}

/// The bucket of `micros`: exact below 8, then eight per power of two.
fn bucket_of(micros: u64) -> usize {
    if micros < u64::from(SUB_BUCKETS) {
        return micros as usize;
    }
    let power = 63 - micros.leading_zeros(); // >= 3
    let sub = (micros >> (power - 3)) & u64::from(SUB_BUCKETS - 1);
    ((power - 2) * SUB_BUCKETS + sub as u32) as usize
}

/// The largest value of `bucket`.
fn upper_bound(bucket: usize) -> u64 {
    let bucket = bucket as u32;
    if bucket < SUB_BUCKETS {
        return u64::from(bucket);
    }
    let power = bucket / SUB_BUCKETS + 2;
    let sub = u64::from(bucket % SUB_BUCKETS);
    let width = 1u64 << (power - 3);
    ((u64::from(SUB_BUCKETS) + sub) * width).saturating_add(width - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_in_a_bucket_whose_bounds_hold_it() {
        for micros in (0..5_000).chain([u64::MAX / 2, u64::MAX]) {
            let bucket = bucket_of(micros);
            assert!(bucket < BUCKETS, "{micros}");
            assert!(upper_bound(bucket) >= micros, "{micros}");
            if bucket > 0 {
                assert!(upper_bound(bucket - 1) < micros, "{micros}");
            }
        }
    }

    #[test]
    fn percentiles_are_within_an_eighth() {
        let recorder = WaitRecorder::new();
        for millis in 1..=100 {
            recorder.acquired(Duration::from_millis(millis));
        }
        let times = recorder.wait_times();
        assert_eq!(times.count, 100);
        let near = |got: Duration, want: u64| {
            let want = Duration::from_millis(want);
            got >= want && got <= want + want / 8
        };
        assert!(near(times.p50, 50), "{times:?}");
        assert!(near(times.p90, 90), "{times:?}");
        assert!(near(times.p99, 99), "{times:?}");
        assert!(near(times.max, 100), "{times:?}");
        assert_eq!(recorder.acquisitions(), 100);
    }

    #[test]
    fn the_top_names_keep_the_longest_waits_within_their_bound() {
        let mut top = TopNames::default();
        for index in 0..1000u64 {
            top.add(&format!("short:{index}"), Duration::from_millis(1));
            if index % 50 == 0 {
                top.add("busy", Duration::from_millis(50));
            }
        }
        assert!(top.names.len() <= TRACKED_NAMES);
        let reported = top.top();
        assert_eq!(reported.len(), REPORTED_NAMES);
        assert_eq!(reported[0].name, "busy");
        assert!(reported[0].waited >= Duration::from_millis(1000));
        assert!(reported[0].waits >= 20);
    }
}
