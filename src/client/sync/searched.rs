//! `parking_lot`'s lock and condition variable and `crossbeam-channel`'s channels, or
//! `shuttle`'s when made inside a schedule search ([`searching`]), behind the API of the
//! first (the part of it the client uses): [`lock`] and [`channel`].
//!
//! `shuttle` runs the threads of a search as coroutines on the thread that runs the search,
//! so a flag of that thread tells the locks made by any of them. A timed wait does not time
//! out under `shuttle` (it waits for a wake, or the search reports a deadlock): a search
//! proves that the wake comes, not what a timeout does.

mod channel;
mod lock;

use std::cell::Cell;

pub(crate) use channel::{bounded, unbounded, wait_ready, Receiver, RecvTimeoutError, Sender};
pub(crate) use lock::{Condvar, Mutex, MutexGuard};

thread_local! {
    /// This thread runs a schedule search.
    static SEARCHING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `search`, a `shuttle` search: the locks, condition variables and channels made in
/// its runs are `shuttle`'s.
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

/// Whether what is made now is made inside a schedule search.
fn in_search() -> bool {
    SEARCHING.get()
}
