//! The locks, condition variables and channels of the client's state shared between threads:
//! `parking_lot`'s and `crossbeam-channel`'s.
//!
//! Under the unit tests they are those of `searched` instead: the same, except that one made
//! inside a schedule search is `shuttle`'s, so that the search chooses which thread runs
//! next at every lock, wait, wake, send and receive. The code under test is the same either
//! way; only the lock or channel underneath differs. Used by the watchdog, the cleanup
//! thread, the pub/sub hubs and the wait loop, whose searches play the threads that do I/O
//! (the watchdog's, the pub/sub listener's) or give them a send of their own (the cleanup
//! thread), and run the others as they are.

use std::time::Duration;

use crossbeam_channel::Select;

#[cfg(not(test))]
pub(crate) use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};
#[cfg(not(test))]
pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard};
#[cfg(not(test))]
pub(crate) use select_ready as wait_ready;

#[cfg(test)]
pub(crate) mod searched;
#[cfg(test)]
pub(crate) use searched::{
    bounded, unbounded, wait_ready, Condvar, Mutex, MutexGuard, Receiver, RecvTimeoutError, Sender,
};

/// Blocks until any of `receivers` has a value (or is disconnected), `also` turns ready, or
/// `timeout` passes.
pub(crate) fn select_ready(
    receivers: &[&crossbeam_channel::Receiver<()>],
    also: Option<&crossbeam_channel::Receiver<()>>,
    timeout: Duration,
) {
    let mut select = Select::new();
    for receiver in receivers {
        select.recv(receiver);
    }
    if let Some(also) = also {
        select.recv(also);
    }
    let _ = select.ready_timeout(timeout);
}
