//! The wait loop's promises under the orders of its threads' steps, searched by `shuttle`:
//! two waiters run the loop for a lock another thread holds, on the release channel of a
//! pub/sub hub (its listener played by the search: a release's message is heard some time
//! after the lock is freed), and each that takes the lock frees it the same way. One of
//! them may fail a try after it slept (an error ends its wait), with the wake it took
//! unused. The hub's lock and the waiters' wake channels are `shuttle`'s here (see
//! [`client::sync`](crate::client::sync)), and their timed waits never time out: a wait
//! that only a timeout would end is a deadlock the search reports.
//!
//! The promises: no wake is lost: a release between a waiter's try and its sleep, or before
//! it subscribed, is not missed, and a wake a failing waiter took goes to the other waiter;
//! so every waiter that does not fail takes the lock; and no waiter is left on the hub's
//! channels, or counted as waiting.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shuttle::thread;

use super::{wait_until, Attempt, WaitFor};
use crate::client::pubsub::offline::OfflineHub;
use crate::client::stats::WaitRecorder;
use crate::client::sync::searched::search_random;
use crate::client::sync::Mutex;
use crate::error::{Error, Result};

const LOCK: &str = "lock";
const CHANNEL: &str = "redisson_lock__channel:{lock}";
/// The random orders of each case.
const ORDERS: usize = 2000;

/// One case: whether the waiters subscribe before their first try, and whether the first
/// waiter's try after its first sleep fails.
#[derive(Clone, Copy, Debug)]
struct Case {
    subscribe_first: bool,
    first_fails: bool,
}

/// What the threads share: the lock in the server (its holder), the hub, the waiters'
/// counters.
struct World {
    holder: Mutex<Option<&'static str>>,
    hub: OfflineHub,
    recorder: WaitRecorder,
}

impl World {
    /// Frees the lock held by `me`; its release's message is heard later.
    fn release(&self, me: &str) {
        let mut holder = self.holder.lock();
        assert_eq!(*holder, Some(me), "freed by another than its holder");
        *holder = None;
        drop(holder);
        thread::yield_now();
        self.hub.heard(CHANNEL, b"0");
    }

    /// One try of `me`: the lock taken if free.
    fn try_take(&self, me: &'static str) -> Attempt<()> {
        let mut holder = self.holder.lock();
        match *holder {
            None => {
                *holder = Some(me);
                Attempt::Taken(())
            }
            Some(_) => Attempt::Held { hint: None },
        }
    }
}

/// How many tries a wait makes before it first sleeps: a failing waiter's tries after them
/// fail (each follows a wake: a searched sleep ends only by one).
fn tries_before_sleeping(case: Case) -> usize {
    match case.subscribe_first {
        true => 1,
        false => 2,
    }
}

/// A waiter's wait for the lock, and its release once it took it.
fn waiter(world: &World, me: &'static str, case: Case, fails: bool) -> Result<()> {
    let tries = AtomicUsize::new(0);
    let attempt = || {
        let tried = tries.fetch_add(1, Ordering::SeqCst) + 1;
        if fails && tried > tries_before_sleeping(case) {
            return Err(Error::ShutDown);
        }
        Ok(world.try_take(me))
    };
    let taken = wait_until(WaitFor {
        name: Some(LOCK),
        deadline: None,
        default_hint: Duration::from_secs(3600),
        subscribe: || Ok(vec![world.hub.subscribe(CHANNEL, LOCK)?]),
        attempt,
        ensure_running: || Ok(()),
        cancel: None,
        outage_grace: Duration::ZERO,
        recorder: &world.recorder,
        nudge: None,
        subscribe_first: case.subscribe_first,
    })?;
    assert!(taken.is_some(), "{case:?}: a wait without deadline ran out");
    thread::yield_now();
    world.release(me);
    Ok(())
}

/// Runs `case` once, in the order shuttle chose, and checks the promises; counts a run
/// where a waiter failed into `failed`.
fn run(case: Case, failed: &AtomicUsize) {
    let world = Arc::new(World {
        holder: Mutex::new(Some("first holder")),
        hub: OfflineHub::new(),
        recorder: WaitRecorder::new(),
    });
    let waiters: Vec<_> = [("a", case.first_fails), ("b", false)]
        .into_iter()
        .map(|(me, fails)| {
            let world = Arc::clone(&world);
            thread::spawn(move || (fails, waiter(&world, me, case, fails)))
        })
        .collect();
    thread::yield_now();
    world.release("first holder");
    for waiting in waiters {
        let (fails, waited) = waiting.join().expect("a waiter");
        if let Err(err) = waited {
            assert!(fails, "{case:?}: a wait failed: {err}");
            failed.fetch_add(1, Ordering::SeqCst);
        }
    }
    assert_eq!(*world.holder.lock(), None, "{case:?}: the lock left held");
    assert_eq!(
        world.hub.channel_count(),
        0,
        "{case:?}: a waiter left on a channel"
    );
    assert_eq!(
        world.recorder.waiting(),
        0,
        "{case:?}: a waiter still counted"
    );
}

/// Every case in `ORDERS` random orders; in a case with a failing waiter, it fails in some.
#[test]
fn no_wake_is_lost_in_random_orders() {
    for subscribe_first in [false, true] {
        for first_fails in [false, true] {
            let case = Case {
                subscribe_first,
                first_fails,
            };
            let failed = Arc::new(AtomicUsize::new(0));
            search_random(ORDERS, {
                let failed = Arc::clone(&failed);
                move || run(case, &failed)
            });
            let failures = failed.load(Ordering::SeqCst);
            assert_eq!(failures > 0, first_fails, "{case:?}: {failures} failures");
        }
    }
}
