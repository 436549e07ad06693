//! A lock and a condition variable: `parking_lot`'s, or `shuttle`'s inside a search.

use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use super::in_search;

pub(crate) enum Mutex<T> {
    Plain(parking_lot::Mutex<T>),
    Searched(shuttle::sync::Mutex<T>),
}

pub(crate) enum MutexGuard<'a, T> {
    Plain(parking_lot::MutexGuard<'a, T>),
    Searched {
        lock: &'a shuttle::sync::Mutex<T>,
        /// Empty only while its thread waits on a condition variable, or runs unlocked.
        guard: Option<shuttle::sync::MutexGuard<'a, T>>,
    },
}

pub(crate) enum Condvar {
    Plain(parking_lot::Condvar),
    Searched(shuttle::sync::Condvar),
}

/// Whether a timed wait ended by its deadline.
pub(crate) struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    pub(crate) fn timed_out(&self) -> bool {
        self.0
    }
}

/// Locks a searched lock.
fn lock_searched<T>(lock: &shuttle::sync::Mutex<T>) -> shuttle::sync::MutexGuard<'_, T> {
    lock.lock().expect("a searched lock's holder panicked")
}

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        match in_search() {
            false => Mutex::Plain(parking_lot::Mutex::new(value)),
            true => Mutex::Searched(shuttle::sync::Mutex::new(value)),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        match self {
            Mutex::Plain(lock) => MutexGuard::Plain(lock.lock()),
            Mutex::Searched(lock) => MutexGuard::Searched {
                lock,
                guard: Some(lock_searched(lock)),
            },
        }
    }
}

impl<'a, T> MutexGuard<'a, T> {
    /// Runs `run` with the lock let go, and takes it again.
    pub(crate) fn unlocked<U>(guard: &mut Self, run: impl FnOnce() -> U) -> U {
        match guard {
            MutexGuard::Plain(guard) => parking_lot::MutexGuard::unlocked(guard, run),
            MutexGuard::Searched { lock, guard } => {
                guard.take();
                let ran = run();
                *guard = Some(lock_searched(lock));
                ran
            }
        }
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            MutexGuard::Plain(guard) => guard,
            MutexGuard::Searched { guard, .. } => guard.as_ref().expect("the lock is held"),
        }
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        match self {
            MutexGuard::Plain(guard) => guard,
            MutexGuard::Searched { guard, .. } => guard.as_mut().expect("the lock is held"),
        }
    }
}

impl Condvar {
    pub(crate) fn new() -> Self {
        match in_search() {
            false => Condvar::Plain(parking_lot::Condvar::new()),
            true => Condvar::Searched(shuttle::sync::Condvar::new()),
        }
    }

    pub(crate) fn notify_one(&self) {
        match self {
            Condvar::Plain(condvar) => {
                condvar.notify_one();
            }
            Condvar::Searched(condvar) => condvar.notify_one(),
        }
    }

    pub(crate) fn notify_all(&self) {
        match self {
            Condvar::Plain(condvar) => {
                condvar.notify_all();
            }
            Condvar::Searched(condvar) => condvar.notify_all(),
        }
    }

    pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
        self.wait_by(guard, None);
    }

    /// Waits for a wake, or until `at` (a searched wait waits for the wake).
    pub(crate) fn wait_until<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        at: Instant,
    ) -> WaitTimeoutResult {
        WaitTimeoutResult(self.wait_by(guard, Some(at)))
    }

    /// Waits for a wake, or for `timeout` (a searched wait waits for the wake).
    pub(crate) fn wait_for<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        timeout: Duration,
    ) -> WaitTimeoutResult {
        match (self, &mut *guard) {
            (Condvar::Plain(condvar), MutexGuard::Plain(guard)) => {
                WaitTimeoutResult(condvar.wait_for(guard, timeout).timed_out())
            }
            _ => WaitTimeoutResult(self.wait_by(guard, None)),
        }
    }

    /// Waits for a wake, or until `at` if there is one; answers whether it timed out.
    fn wait_by<T>(&self, guard: &mut MutexGuard<'_, T>, at: Option<Instant>) -> bool {
        match (self, guard) {
            (Condvar::Plain(condvar), MutexGuard::Plain(guard)) => match at {
                Some(at) => condvar.wait_until(guard, at).timed_out(),
                None => {
                    condvar.wait(guard);
                    false
                }
            },
            (Condvar::Searched(condvar), MutexGuard::Searched { guard, .. }) => {
                let held = guard.take().expect("the lock is held");
                let woken = condvar
                    .wait(held)
                    .expect("a searched lock's holder panicked");
                *guard = Some(woken);
                false
            }
            _ => unreachable!("a lock and a condition variable made apart from each other"),
        }
    }
}
