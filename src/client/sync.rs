//! The locks, condition variables and channels of the client's state shared between threads:
//! `parking_lot`'s and `crossbeam-channel`'s.
//!
//! Under the unit tests they are [`searched`]'s instead: the same, except that one made
//! inside a schedule search is `shuttle`'s, so that the search chooses which thread runs
//! next at every lock, wait, wake, send and receive. The code under test is the same either
//! way; only the lock or channel underneath differs. Used by the watchdog and the cleanup
//! thread, whose threads' steps are searched so.

#[cfg(not(test))]
pub(crate) use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
#[cfg(not(test))]
pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard};

#[cfg(test)]
pub(crate) mod searched;
#[cfg(test)]
pub(crate) use searched::{
    unbounded, Condvar, Mutex, MutexGuard, Receiver, RecvTimeoutError, Sender,
};
