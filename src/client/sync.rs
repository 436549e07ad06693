//! The locks and condition variables of the client's state shared between threads:
//! `parking_lot`'s.
//!
//! Under the unit tests they are [`searched`]'s instead: `parking_lot`'s, except that one made
//! inside a schedule search is `shuttle`'s, so that the search chooses which thread runs
//! next at every lock, wait and wake. The code under test is the same either way; only the
//! lock underneath differs. Used by the watchdog, whose threads' steps are searched so.

#[cfg(not(test))]
pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard};

#[cfg(test)]
pub(crate) mod searched;
#[cfg(test)]
pub(crate) use searched::{Condvar, Mutex, MutexGuard};
