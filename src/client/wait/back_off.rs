//! How far apart a waiter that polls spaces its tries ([`BackOff`], a spin lock's policy),
//! and the random spread that keeps waiters from trying in step ([`jittered`]).
//!
//! Plain values and arithmetic: no I/O, no state beyond the count of tries a wait keeps.

use std::time::Duration;

use crate::error::{Error, Result};

/// How a spin lock's waiter spaces its tries (see
/// [`LockManager::spin_lock`](crate::LockManager::spin_lock)): the `n`-th pause (from 0) is
/// drawn at random between half and all of `min(initial * 2^n, max)`, so that the pauses
/// double from `initial` up to `max` and waiters that started together do not try in step.
/// Once its pauses reach `max`, a waiter sends about one try per `0.75 * max`, and never more
/// than one per `max / 2`, but where the holder's lease runs out sooner (a pause never
/// exceeds the lease left, nor the wait's deadline), during an outage (every wait tries again
/// each 100 ms then), and when a release of its own process hands it the lock.
///
/// The default has the range of Redisson's (`LockOptions.defaults()`): from 1 ms up to
/// 128 ms. Redisson sleeps each step whole; here a pause is spread below its step.
///
/// ```
/// use std::time::Duration;
/// use redlease::BackOff;
///
/// let quick = BackOff::exponential(Duration::from_millis(2), Duration::from_millis(50))?;
/// assert_eq!(quick.max_delay(), Duration::from_millis(50));
/// let steady = BackOff::constant(Duration::from_millis(200))?;
/// assert_eq!(steady.initial_delay(), steady.max_delay());
/// assert!(BackOff::constant(Duration::ZERO).is_err());
/// # Ok::<(), redlease::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackOff {
    initial: Duration,
    max: Duration,
}

impl BackOff {
    /// The shortest pause a back-off may start with: a shorter one would make the waiter a
    /// busy loop on Redis.
    pub const MIN_DELAY: Duration = Duration::from_millis(1);

    /// The longest pause a back-off may reach: a waiter that looks less often than this
    /// misses most releases to waiters that listen for them.
    pub const MAX_DELAY: Duration = Duration::from_secs(60);

    /// Pauses that double from `initial` up to `max`, each drawn between half and all of its
    /// step.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `initial` is under [`MIN_DELAY`](Self::MIN_DELAY),
    /// `max` is under `initial`, or `max` is over [`MAX_DELAY`](Self::MAX_DELAY).
    pub fn exponential(initial: Duration, max: Duration) -> Result<BackOff> {
        if initial < Self::MIN_DELAY {
            return Err(Error::InvalidArgument(format!(
                "a back-off's first pause of {initial:?} is under the minimum of {:?}",
                Self::MIN_DELAY
            )));
        }
        if max < initial || max > Self::MAX_DELAY {
            return Err(Error::InvalidArgument(format!(
                "a back-off's longest pause of {max:?} must lie between its first ({initial:?}) \
                 and {:?}",
                Self::MAX_DELAY
            )));
        }
        Ok(BackOff { initial, max })
    }

    /// Pauses of about `delay` each (drawn between half and all of it).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `delay` lies outside
    /// [`MIN_DELAY`](Self::MIN_DELAY)..=[`MAX_DELAY`](Self::MAX_DELAY).
    pub fn constant(delay: Duration) -> Result<BackOff> {
        BackOff::exponential(delay, delay)
    }

    /// The step of the first pause.
    pub fn initial_delay(&self) -> Duration {
        self.initial
    }

    /// The step the pauses grow to, and stay at.
    pub fn max_delay(&self) -> Duration {
        self.max
    }

    /// The step of the pause after the try numbered `tries` (from 0): `initial * 2^tries`,
    /// at most `max`.
    fn step(&self, tries: u32) -> Duration {
        let doubled = 2u32
            .checked_pow(tries)
            .and_then(|factor| self.initial.checked_mul(factor));
        doubled.map_or(self.max, |step| step.min(self.max))
    }

    /// The pause after the try numbered `tries` (from 0): between half and all of its step,
    /// at random.
    pub(crate) fn pause(&self, tries: u32) -> Duration {
        let step = self.step(tries);
        step.mul_f64(0.5 + random_fraction() / 2.0)
    }
}

impl Default for BackOff {
    /// From 1 ms up to 128 ms, the range of Redisson's spin lock.
    fn default() -> Self {
        BackOff {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(128),
        }
    }
}

/// `delay` times a random factor between 0.5 and 1.5.
pub(crate) fn jittered(delay: Duration) -> Duration {
    delay.mul_f64(0.5 + random_fraction())
}

/// A random number in `[0, 1)`.
fn random_fraction() -> f64 {
    // Any source of randomness does; the v4 UUID generator is at hand. The high half of a v4
    // UUID is random but for the version nibble, which lands in the lowest bits kept here.
    let bits = (uuid::Uuid::new_v4().as_u128() >> 64) as u64 >> 11;
    bits as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn pauses_double_up_to_the_longest_and_stay_between_half_and_all_of_their_step() {
        let back_off = BackOff::exponential(4 * MS, 50 * MS).unwrap();
        let steps: Vec<Duration> = (0..6).map(|tries| back_off.step(tries)).collect();
        assert_eq!(steps, [4 * MS, 8 * MS, 16 * MS, 32 * MS, 50 * MS, 50 * MS]);
        for tries in [0, 1, 4, 31, 32, 1000, u32::MAX] {
            let step = back_off.step(tries);
            for _ in 0..200 {
                let pause = back_off.pause(tries);
                assert!(pause >= step / 2 && pause <= step, "{pause:?} of {step:?}");
            }
        }
    }

    #[test]
    fn pauses_are_spread_at_random() {
        let back_off = BackOff::constant(100 * MS).unwrap();
        let pauses: std::collections::HashSet<Duration> =
            (0..50).map(|_| back_off.pause(7)).collect();
        assert!(pauses.len() > 40, "{} distinct pauses of 50", pauses.len());
    }

    #[test]
    fn a_back_off_outside_its_bounds_is_refused() {
        for (initial, max) in [
            (Duration::ZERO, MS),
            (MS / 2, MS),
            (10 * MS, 5 * MS),
            (MS, BackOff::MAX_DELAY + MS),
        ] {
            let refused = BackOff::exponential(initial, max);
            assert!(
                matches!(refused, Err(Error::InvalidArgument(_))),
                "{initial:?}..{max:?}: {refused:?}"
            );
        }
        assert!(BackOff::exponential(MS, BackOff::MAX_DELAY).is_ok());
        assert_eq!(BackOff::default().initial_delay(), MS);
        assert_eq!(BackOff::default().max_delay(), 128 * MS);
    }
}
