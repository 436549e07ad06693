//! `parking_lot`'s lock and condition variable and `crossbeam-channel`'s unbounded channel,
//! or `shuttle`'s when made inside a schedule search ([`searching`]), behind the API of the
//! first (the part of it the client uses).
//!
//! `shuttle` runs the threads of a search as coroutines on the thread that runs the search,
//! so a flag of that thread tells the locks made by any of them. A condition variable's
//! timed wait, or a channel's, does not time out under `shuttle` (it waits for a wake, or
//! the search reports a deadlock): a search proves that the wake comes, not what a timeout
//! does.

use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

pub(crate) use crossbeam_channel::RecvTimeoutError;
use crossbeam_channel::{RecvError, SendError};

thread_local! {
    /// This thread runs a schedule search.
    static SEARCHING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `search`, a `shuttle` search: the locks and condition variables made in its runs are
/// `shuttle`'s.
pub(crate) fn searching<R>(search: impl FnOnce() -> R) -> R {
    struct Searched;
    impl Drop for Searched {
        fn drop(&mut self) {
            SEARCHING.set(false);
        }
    }
    SEARCHING.set(true);
    let _searched = Searched;
    search()
}

pub(crate) enum Mutex<T> {
    Plain(parking_lot::Mutex<T>),
    Searched(shuttle::sync::Mutex<T>),
}

pub(crate) enum MutexGuard<'a, T> {
    Plain(parking_lot::MutexGuard<'a, T>),
    /// Empty only while its thread waits on a condition variable.
    Searched(Option<shuttle::sync::MutexGuard<'a, T>>),
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

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        match SEARCHING.get() {
            false => Mutex::Plain(parking_lot::Mutex::new(value)),
            true => Mutex::Searched(shuttle::sync::Mutex::new(value)),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        match self {
            Mutex::Plain(lock) => MutexGuard::Plain(lock.lock()),
            Mutex::Searched(lock) => MutexGuard::Searched(Some(
                lock.lock().expect("a searched lock's holder panicked"),
            )),
        }
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            MutexGuard::Plain(guard) => guard,
            MutexGuard::Searched(guard) => guard.as_ref().expect("the lock is held"),
        }
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        match self {
            MutexGuard::Plain(guard) => guard,
            MutexGuard::Searched(guard) => guard.as_mut().expect("the lock is held"),
        }
    }
}

impl Condvar {
    pub(crate) fn new() -> Self {
        match SEARCHING.get() {
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
        self.wait_for(guard, None);
    }

    /// Waits for a wake, or until `at` (a searched wait waits for the wake).
    pub(crate) fn wait_until<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        at: Instant,
    ) -> WaitTimeoutResult {
        WaitTimeoutResult(self.wait_for(guard, Some(at)))
    }

    /// Waits for a wake, or until `at` if there is one; answers whether it timed out.
    fn wait_for<T>(&self, guard: &mut MutexGuard<'_, T>, at: Option<Instant>) -> bool {
        match (self, guard) {
            (Condvar::Plain(condvar), MutexGuard::Plain(guard)) => match at {
                Some(at) => condvar.wait_until(guard, at).timed_out(),
                None => {
                    condvar.wait(guard);
                    false
                }
            },
            (Condvar::Searched(condvar), MutexGuard::Searched(guard)) => {
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

pub(crate) enum Sender<T> {
    Plain(crossbeam_channel::Sender<T>),
    Searched(shuttle::sync::mpsc::Sender<T>),
}

pub(crate) enum Receiver<T> {
    Plain(crossbeam_channel::Receiver<T>),
    Searched(shuttle::sync::mpsc::Receiver<T>),
}

/// A channel without a bound.
pub(crate) fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    match SEARCHING.get() {
        false => {
            let (sender, receiver) = crossbeam_channel::unbounded();
            (Sender::Plain(sender), Receiver::Plain(receiver))
        }
        true => {
            let (sender, receiver) = shuttle::sync::mpsc::channel();
            (Sender::Searched(sender), Receiver::Searched(receiver))
        }
    }
}

impl<T> Sender<T> {
    pub(crate) fn send(&self, value: T) -> Result<(), SendError<T>> {
        match self {
            Sender::Plain(sender) => sender.send(value),
            Sender::Searched(sender) => sender.send(value).map_err(|err| SendError(err.0)),
        }
    }
}

impl<T> Receiver<T> {
    pub(crate) fn recv(&self) -> Result<T, RecvError> {
        match self {
            Receiver::Plain(receiver) => receiver.recv(),
            Receiver::Searched(receiver) => receiver.recv().map_err(|_| RecvError),
        }
    }

    /// Waits for a value for `timeout` at most (a searched receiver waits for the value, or
    /// the disconnection).
    pub(crate) fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        match self {
            Receiver::Plain(receiver) => receiver.recv_timeout(timeout),
            Receiver::Searched(receiver) => {
                receiver.recv().map_err(|_| RecvTimeoutError::Disconnected)
            }
        }
    }

    /// The values waiting now.
    pub(crate) fn try_iter(&self) -> impl Iterator<Item = T> + '_ {
        std::iter::from_fn(move || match self {
            Receiver::Plain(receiver) => receiver.try_recv().ok(),
            Receiver::Searched(receiver) => receiver.try_recv().ok(),
        })
    }
}
