//! Handoffs inside the release: a plain lock handed to another thread of the same manager, a
//! fair lock granted to the next in line in any process. Counters stay exact and fencing
//! tokens increase across both; a waiter that stops waiting, dies or is stopped as the lock
//! is handed to it does not keep the lock from the others.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    assert_nothing_left, child_role, env, eventually, manager_for_url, run_children, server,
    signal, spawn_child, wait_for_line,
};
use redis::Commands;
use redlease::{CancelToken, LockManager};

const PROCESSES: usize = 3;
const THREADS: usize = 4;
const INCREMENTS: usize = 30;

/// Several processes of several threads increment a counter by GET and SET under the lock,
/// and push each hold's fencing token: the counter is exact, the tokens strictly increase in
/// the order the holds came, and handoffs happened.
fn counter_is_exact(kind: &str) {
    let redis = server();
    run_children(
        PROCESSES,
        "handoff::counter_process",
        kind,
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let total: usize = connection.get("counter").unwrap();
    assert_eq!(total, PROCESSES * THREADS * INCREMENTS);
    let tokens: Vec<u64> = connection.lrange("tokens", 0, -1).unwrap();
    assert_eq!(tokens.len(), total);
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "fencing tokens out of order: {tokens:?}"
    );
    let handed: u64 = connection.get("handed").unwrap();
    assert!(handed > 0, "no acquisition was handed on in a release");
    let left: Vec<String> = connection.keys("redlease_lock_grants:*").unwrap();
    assert!(left.is_empty(), "grants left: {left:?}");
}

#[test]
fn plain_handoffs_keep_a_counter_exact_and_tokens_increasing() {
    counter_is_exact("plain");
}

#[test]
fn fair_grants_keep_a_counter_exact_and_tokens_increasing() {
    counter_is_exact("fair");
}

/// Child side of the tests above.
#[test]
#[ignore = "a child process of the tests above, which run it"]
fn counter_process() {
    let Some(kind) = child_role() else {
        return;
    };
    let url = env("REDLEASE_TEST_URL");
    let manager = manager_for_url(&url, Duration::from_secs(5));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let lock = match kind.as_str() {
                "fair" => manager.fair_lock("counter-lock"),
                _ => manager.lock("counter-lock"),
            };
            let url = url.clone();
            std::thread::spawn(move || {
                let mut redis = redis::Client::open(url).unwrap().get_connection().unwrap();
                for _ in 0..INCREMENTS {
                    let guard = lock.lock().unwrap();
                    let value: Option<u64> = redis.get("counter").unwrap();
                    std::thread::yield_now();
                    let _: () = redis.set("counter", value.unwrap_or(0) + 1).unwrap();
                    let _: () = redis.rpush("tokens", guard.fencing_token()).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let mut redis = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis.incr("handed", manager.stats().handoffs).unwrap();
    assert_eq!(manager.watched_locks(), 0);
}

/// A waiter whose wait ends while the release that hands it the lock is on its way (the
/// server is stopped): the lock is freed as soon as the server answers again, not held for the
/// waiter's lease. `stopped` is how long the server stays stopped: shorter than the response
/// timeout, the release is answered; longer than it and the outage grace, the release ends
/// `Indeterminate` and its repeat, sent until answered, settles the handoff.
fn a_handoff_to_a_waiter_that_stopped_waiting(stopped: Duration, waits: Option<Duration>) {
    let redis = server();
    let manager = manager_for_url(&redis.url(), Duration::from_secs(30));
    let lock = manager.lock("given-up");
    // The holder is a thread of its own (a guard stays on its thread), told when to release.
    let (release, released) = crossbeam_channel::bounded::<()>(0);
    let (held, holding) = crossbeam_channel::bounded::<()>(0);
    let releasing = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            held.send(()).unwrap();
            released.recv().unwrap();
            guard.unlock()
        })
    };
    holding.recv().unwrap();
    let cancel = CancelToken::new();
    let waiter = {
        let lock = lock.cancellable_by(&cancel);
        std::thread::spawn(move || match waits {
            Some(wait) => lock.try_lock_for(wait).map(|guard| guard.is_some()),
            None => lock.lock().map(|_| true),
        })
    };
    assert!(eventually(Duration::from_secs(5), || manager
        .stats()
        .waiting
        == 1));
    redis.pause().unwrap();
    let stopped_at = Instant::now();
    release.send(()).unwrap();
    if waits.is_none() {
        // The release is on its way to the stopped server: the waiter gives up meanwhile.
        std::thread::sleep(Duration::from_millis(200));
        cancel.cancel();
    }
    let waited = waiter.join().unwrap();
    assert!(!matches!(waited, Ok(true)), "{waited:?}");
    std::thread::sleep(stopped.saturating_sub(stopped_at.elapsed()));
    redis.resume().unwrap();
    let _ = releasing.join().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || !lock.is_locked().unwrap()),
        "the lock handed to a waiter that gave up is still held: {:?}",
        lock.remaining_ttl()
    );
    assert!(lock.try_lock().unwrap().is_some());
    assert_nothing_left(&manager, &redis);
}

#[test]
fn a_handoff_to_a_waiter_that_gave_up_meanwhile_is_taken_back() {
    a_handoff_to_a_waiter_that_stopped_waiting(Duration::from_millis(500), None);
}

/// The release goes unanswered (the server stays stopped past the response timeout and the
/// outage grace) while the waiter still waits, and tries; its wait ends before the server
/// comes back, which then runs the release that hands it the lock.
#[test]
fn an_unanswered_handoff_to_a_waiter_that_gave_up_is_taken_back() {
    let stopped = Duration::from_secs(4);
    a_handoff_to_a_waiter_that_stopped_waiting(stopped, Some(Duration::from_secs(3)));
}

/// A fair-lock waiter in another process is killed (or stopped) just before the release that
/// grants it the lock: the grant lasts no longer than a place's wait, and the next in line
/// takes the lock after it. A stopped waiter that comes back does not take the expired grant
/// for its own: it queues again and takes the lock in turn, with a larger fencing token.
fn a_grant_to_a_waiter_that_cannot_take_it(signal_number: libc::c_int) {
    let redis = server();
    let manager = fair_manager(&redis.url());
    let lock = manager.fair_lock("granted");
    let guard = lock.lock().unwrap();
    let mut child = spawn_child(
        "handoff::fair_waiter_process",
        "wait",
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    let mut output = wait_for_line(&mut child, "waiting");
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let queued = |connection: &mut redis::Connection| -> Vec<String> {
        connection
            .lrange("redisson_lock_queue:{granted}", 0, -1)
            .unwrap()
    };
    assert!(eventually(Duration::from_secs(10), || queued(
        &mut connection
    )
    .len()
        == 1));
    let child_holder = queued(&mut connection).remove(0);
    signal(&child, signal_number);
    // A waiter of this process queues behind the stopped one.
    let next = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            let token = guard.fencing_token();
            std::thread::sleep(Duration::from_millis(300));
            token
        })
    };
    assert!(eventually(Duration::from_secs(10), || queued(
        &mut connection
    )
    .len()
        == 2));
    let released = Instant::now();
    guard.unlock().unwrap();
    let held_by_child: bool = connection.hexists("granted", &child_holder).unwrap();
    assert!(
        held_by_child,
        "the release did not grant the lock to the next in line"
    );
    let ttl: i64 = connection.pttl("granted").unwrap();
    assert!(
        ttl <= LEASE.min(PLACE).as_millis() as i64,
        "a grant of {ttl} ms"
    );
    let next_token = next.join().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "the next in line waited {:?}",
        released.elapsed()
    );
    if signal_number == libc::SIGSTOP {
        signal(&child, libc::SIGCONT);
        let taken: u64 = common::line_with(&mut output, "took ").parse().unwrap();
        assert!(taken > next_token, "{taken} after {next_token}");
        assert!(child.wait_within(common::CHILD_DEADLINE).success());
    }
    assert!(eventually(Duration::from_secs(10), || !lock
        .is_locked()
        .unwrap()));
    assert!(queued(&mut connection).is_empty());
    assert_nothing_left(&manager, &redis);
}

#[test]
fn a_grant_to_a_killed_waiter_ends_with_a_places_wait() {
    a_grant_to_a_waiter_that_cannot_take_it(libc::SIGKILL);
}

#[test]
fn a_grant_to_a_stopped_waiter_ends_with_a_places_wait_and_it_queues_again() {
    a_grant_to_a_waiter_that_cannot_take_it(libc::SIGSTOP);
}

/// The fair lock's lease and place timeout in the tests above: a grant lasts the shorter.
const LEASE: Duration = Duration::from_secs(2);
const PLACE: Duration = Duration::from_secs(5);

fn fair_manager(url: &str) -> LockManager {
    LockManager::builder(url)
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(LEASE)
        .fair_lock_place_timeout(PLACE)
        .build()
        .unwrap()
}

/// Child side of the tests above: waits for the fair lock, says when it took it and with
/// which token, and lets it go.
#[test]
#[ignore = "a child process of the tests above, which run it"]
fn fair_waiter_process() {
    if child_role().as_deref() != Some("wait") {
        return;
    }
    let manager = fair_manager(&env("REDLEASE_TEST_URL"));
    let lock = manager.fair_lock("granted");
    println!("waiting");
    let guard = lock.lock().unwrap();
    println!("took {}", guard.fencing_token());
    drop(guard);
    manager.shutdown();
}

/// A grant waits for no one but the holder it names: the lock handed to the next thread of a
/// manager is that thread's, whichever thread asked first.
#[test]
fn a_handed_lock_is_held_by_the_waiting_thread() {
    let redis = server();
    let manager = Arc::new(manager_for_url(&redis.url(), Duration::from_secs(30)));
    let lock = manager.lock("handed");
    let guard = lock.lock().unwrap();
    let token = guard.fencing_token();
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            (guard.fencing_token(), lock.hold_count().unwrap())
        })
    };
    assert!(eventually(Duration::from_secs(5), || manager
        .stats()
        .waiting
        == 1));
    guard.unlock().unwrap();
    let (handed_token, count) = waiter.join().unwrap();
    assert!(handed_token > token);
    assert_eq!(count, 1);
    assert_eq!(manager.stats().handoffs, 1);
    assert!(!lock.is_locked().unwrap());
    assert_nothing_left(&manager, &redis);
}

/// A client that runs Redisson's own fair-lock scripts, queued between two `redlease` waiters:
/// the release before it grants the lock to the `redlease` waiter ahead of it; its own turn
/// comes as Redisson expects (woken with `0` on its channel, never granted, which its script
/// would count as a reentry), it takes the lock once and releases it once, and the waiter
/// behind it is woken by Redisson's release and takes the lock. Nothing is left after.
#[test]
fn a_redisson_waiter_among_redlease_waiters_takes_once_releases_once() {
    const JAVA: &str = "java-uuid:7";
    let redis = server();
    let manager = manager_for_url(&redis.url(), Duration::from_secs(30));
    let lock = manager.fair_lock("interop");
    let release = redis::Script::new(include_str!("../redisson/fair_release.lua"));
    let mut java = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut listener = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut wakes = listener.as_pubsub();
    wakes
        .subscribe(format!("redisson_lock__channel:{{interop}}:{JAVA}"))
        .unwrap();
    wakes
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let java_acquire = |connection: &mut redis::Connection| {
        common::redisson::fair_acquire(connection, "interop", JAVA)
    };
    let queue = |connection: &mut redis::Connection| -> Vec<String> {
        connection
            .lrange("redisson_lock_queue:{interop}", 0, -1)
            .unwrap()
    };
    let (release_first, first_released) = crossbeam_channel::bounded::<()>(0);
    let (held, holding) = crossbeam_channel::bounded::<u64>(0);
    let first = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            held.send(guard.fencing_token()).unwrap();
            first_released.recv().unwrap();
        })
    };
    let first_token = holding.recv().unwrap();
    // In line: a redlease waiter, the Redisson client, a redlease waiter.
    let waiter = |lock: &redlease::Lock| {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            let token = guard.fencing_token();
            std::thread::sleep(Duration::from_millis(100));
            token
        })
    };
    let second = waiter(&lock);
    assert!(eventually(Duration::from_secs(5), || queue(&mut java)
        .len()
        == 1));
    assert!(
        java_acquire(&mut java).is_some(),
        "the Redisson client jumped the queue"
    );
    assert!(eventually(Duration::from_secs(5), || queue(&mut java)
        .len()
        == 2));
    let third = waiter(&lock);
    assert!(eventually(Duration::from_secs(5), || queue(&mut java)
        .len()
        == 3));

    release_first.send(()).unwrap();
    first.join().unwrap();
    let second_token = second.join().unwrap();
    assert!(second_token > first_token);
    assert_eq!(
        manager.stats().handoffs,
        1,
        "the first release granted the lock"
    );
    // The second's release wakes the Redisson client, and grants it nothing.
    let wake = wakes.get_message().expect("the Redisson client is woken");
    assert_eq!(wake.get_payload::<String>().unwrap(), "0");
    let granted: bool = java.hexists("interop", JAVA).unwrap();
    assert!(!granted, "the lock was granted to the Redisson client");
    assert_eq!(
        java_acquire(&mut java),
        None,
        "the Redisson client takes its turn"
    );
    let count: u32 = java.hget("interop", JAVA).unwrap();
    assert_eq!(count, 1, "the Redisson client holds the lock once");
    let released: i64 = release
        .key("interop")
        .key("redisson_lock_queue:{interop}")
        .key("redisson_lock_timeout:{interop}")
        .key("redisson_lock__channel:{interop}")
        .key("redisson_unlock_latch:{interop}:java-release-1")
        .arg(0)
        .arg(30_000)
        .arg(JAVA)
        .arg(0)
        .arg("PUBLISH")
        .arg(10_000)
        .invoke(&mut java)
        .unwrap();
    assert_eq!(released, 1, "one release frees the Redisson client's hold");
    let third_token = third.join().unwrap();
    assert!(third_token > second_token);
    assert!(eventually(Duration::from_secs(5), || !lock
        .is_locked()
        .unwrap()));
    assert!(queue(&mut java).is_empty());
    let grants: bool = java.exists("redlease_lock_grants:{interop}").unwrap();
    assert!(!grants, "the grants of the waiters are left");
    drop(wakes);
    assert_nothing_left(&manager, &redis);
}

/// Writers of one manager hand the write lock to each other; the counter stays exact, the
/// fencing tokens increase, and a reader of another manager (another process, as far as
/// handoffs go) still gets its turns: after a bounded number of handoffs a release frees the
/// lock for everyone.
#[test]
fn writers_hand_the_write_lock_on_and_readers_still_get_in() {
    let redis = server();
    let writers = manager_for_url(&redis.url(), Duration::from_secs(30));
    let readers = manager_for_url(&redis.url(), Duration::from_secs(30));
    let rw = writers.read_write_lock("shared");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tokens = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (write, url) = (rw.write().clone(), redis.url());
            let (stop, tokens) = (Arc::clone(&stop), Arc::clone(&tokens));
            std::thread::spawn(move || {
                let mut redis = redis::Client::open(url).unwrap().get_connection().unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let guard = write.lock().unwrap();
                    let value: Option<u64> = redis.get("written").unwrap();
                    std::thread::yield_now();
                    let _: () = redis.set("written", value.unwrap_or(0) + 1).unwrap();
                    tokens.lock().push(guard.fencing_token());
                }
            })
        })
        .collect();
    let read = readers.read_write_lock("shared").read().clone();
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    for _ in 0..10 {
        let started = Instant::now();
        let guard = read.lock().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a reader starved"
        );
        let _: Option<u64> = connection.get("written").unwrap();
        drop(guard);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    let tokens = tokens.lock();
    let written: usize = connection.get("written").unwrap();
    assert_eq!(written, tokens.len());
    assert!(tokens.windows(2).all(|pair| pair[0] < pair[1]));
    assert!(writers.stats().handoffs > 0, "no write lock was handed on");
    assert!(!rw.write().is_locked().unwrap());
    assert_nothing_left(&writers, &redis);
    assert_nothing_left(&readers, &redis);
}
