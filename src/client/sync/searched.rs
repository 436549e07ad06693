//! `parking_lot`'s lock and condition variable and `crossbeam-channel`'s channels, or
//! `shuttle`'s when made inside a schedule search ([`search_random`]), behind the API of the
//! first (the part of it the client uses): [`lock`] and [`channel`]. And what the searches
//! share: [`search_random`], which runs one, and [`Events`], what their threads did.
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

/// An address where no server answers: the searches' clients never connect.
pub(crate) const NO_SERVER: &str = "redis://127.0.0.1:1/";

/// The seed of every search's random orders.
const SEED: u64 = 0x5eed;

thread_local! {
    /// This thread runs a schedule search.
    static SEARCHING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `run` in `orders` random orders of its threads' steps, from a fixed seed, with the
/// locks, condition variables and channels made in it `shuttle`'s. A failing order is
/// printed as a schedule `shuttle::replay` runs again.
pub(crate) fn search_random(orders: usize, run: impl Fn() + Send + Sync + 'static) {
    /// Sets the flag back as it was.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SEARCHING.set(self.0);
        }
    }
    let _restore = Restore(SEARCHING.replace(true));
    shuttle::check_random_with_seed(run, SEED, orders);
}

/// Whether what is made now is made inside a schedule search.
fn in_search() -> bool {
    SEARCHING.get()
}

/// What the threads of a search did, in order.
pub(crate) struct Events<E>(std::sync::Mutex<Vec<E>>);

impl<E: Clone> Events<E> {
    pub(crate) fn new() -> Self {
        Events(std::sync::Mutex::new(Vec::new()))
    }

    pub(crate) fn push(&self, event: E) {
        self.0
            .lock()
            .expect("a thread of the search panicked")
            .push(event);
    }

    pub(crate) fn all(&self) -> Vec<E> {
        self.0
            .lock()
            .expect("a thread of the search panicked")
            .clone()
    }
}
