//! The counting semaphore on a real server: never more holders than permits across processes
//! and threads, waiters woken by releases (the library's and a hand-written client's that
//! follows the documented layout), typed errors for bad input, nothing left behind, and a
//! guard that gives its permits back on a drop, `?` or a panic, once, Redis paused or not.

use crate::common;
use crate::common::semaphores;

use std::time::{Duration, Instant};

use common::{child_role, env, eventually, manager, manager_for_url, run_children, server};
use redlease::Error;
use semaphores::{assert_left_nothing, channel, connection};

const PERMITS: u32 = 3;
const PROCESSES: usize = 4;
const THREADS: usize = 8;
const ROUNDS: usize = 10;
/// A watchdog so long that its fallback look (a third of it) cannot pass for a wake-up.
const LONG_WATCHDOG: Duration = Duration::from_secs(30);
/// How long the tests give a "no hang" condition.
const PATIENCE: Duration = Duration::from_secs(10);

/// Counts the holders inside the critical section and keeps the most there ever were.
const ENTER: &str = "local inside = redis.call('incr', KEYS[1]) \
    if inside > tonumber(redis.call('get', KEYS[2]) or '0') then \
    redis.call('set', KEYS[2], inside) end return inside";

#[test]
fn four_processes_of_eight_threads_never_exceed_the_permits() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let pool = manager.semaphore("crowd");
    assert!(pool.try_set_permits(PERMITS).unwrap());
    run_children(
        PROCESSES,
        "semaphore::crowd_process",
        "crowd",
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    let mut plain = connection(&redis);
    let most: u32 = redis::cmd("GET")
        .arg("crowd:most")
        .query(&mut plain)
        .unwrap();
    let entries: usize = redis::cmd("GET")
        .arg("crowd:entries")
        .query(&mut plain)
        .unwrap();
    let inside: u32 = redis::cmd("GET")
        .arg("crowd:inside")
        .query(&mut plain)
        .unwrap();
    eprintln!("at most {most} holders at once");
    assert!(most <= PERMITS, "{most} holders at once");
    assert!(most >= 2, "the permits were shared: {most} at most");
    assert_eq!(entries, PROCESSES * THREADS * ROUNDS);
    assert_eq!(inside, 0);
    assert_eq!(pool.available_permits().unwrap(), u64::from(PERMITS));
    assert_left_nothing(&manager, &redis, "crowd");
}

/// Child side of the test above: eight threads that enter the critical section `ROUNDS`
/// times each, under one permit.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn crowd_process() {
    if child_role().as_deref() != Some("crowd") {
        return;
    }
    let url = env("REDLEASE_TEST_URL");
    let manager = manager_for_url(&url, LONG_WATCHDOG);
    let enter = redis::Script::new(ENTER);
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            let pool = manager.semaphore("crowd");
            let (url, enter) = (&url, &enter);
            scope.spawn(move || {
                let mut plain = redis::Client::open(url.as_str())
                    .unwrap()
                    .get_connection()
                    .unwrap();
                for _ in 0..ROUNDS {
                    pool.acquire(1).unwrap();
                    let _: u32 = enter
                        .key("crowd:inside")
                        .key("crowd:most")
                        .invoke(&mut plain)
                        .unwrap();
                    let _: () = redis::cmd("INCR")
                        .arg("crowd:entries")
                        .query(&mut plain)
                        .unwrap();
                    // Stay a moment, so that the others pile up at the door.
                    std::thread::sleep(Duration::from_millis(1));
                    let _: () = redis::cmd("DECR")
                        .arg("crowd:inside")
                        .query(&mut plain)
                        .unwrap();
                    pool.release(1).unwrap();
                }
            });
        }
    });
    assert_eq!(manager.watched_locks(), 0);
    assert!(eventually(Duration::from_secs(5), || manager
        .subscribed_channels()
        == 0));
}

#[test]
fn a_waiter_on_no_permits_is_woken_promptly_by_a_release_from_another_manager() {
    let redis = server();
    let waiting_manager = manager(&redis, LONG_WATCHDOG);
    let releasing_manager = manager(&redis, LONG_WATCHDOG);
    let pool = waiting_manager.semaphore("door");
    assert!(pool.try_set_permits(0).unwrap());
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            let got = pool.try_acquire_for(1, PATIENCE).unwrap();
            (got, Instant::now())
        });
        assert!(
            eventually(PATIENCE, || waiting_manager.subscribed_channels() == 1),
            "the waiter subscribes"
        );
        let released_at = Instant::now();
        releasing_manager.semaphore("door").release(1).unwrap();
        let (got, woke_at) = waiter.join().unwrap();
        let woken_after = woke_at - released_at;
        eprintln!("woken {woken_after:?} after the release");
        assert!(got);
        assert!(
            woken_after < Duration::from_secs(1),
            "woken by the release, not by the fallback look of {:?}: {woken_after:?}",
            LONG_WATCHDOG / 3
        );
    });
    assert_eq!(pool.available_permits().unwrap(), 0);
    assert_left_nothing(&waiting_manager, &redis, "door");
    assert_left_nothing(&releasing_manager, &redis, "door");
}

/// A hand-written client of the documented layout: takes permits from the count under the
/// name if there are enough; answers 1 or 0.
const HAND_TAKE: &str = "local available = tonumber(redis.call('get', KEYS[1]) or '0') \
    if available >= tonumber(ARGV[1]) then redis.call('decrby', KEYS[1], ARGV[1]) return 1 end \
    return 0";
/// ... and gives permits back, announcing the new count on the channel.
const HAND_RELEASE: &str = "local count = redis.call('incrby', KEYS[1], ARGV[1]) \
    redis.call('publish', KEYS[2], count) return count";

#[test]
fn a_hand_written_client_of_the_layout_excludes_and_wakes_and_is_excluded_and_woken() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let pool = manager.semaphore("shared");
    let (take, give) = (
        redis::Script::new(HAND_TAKE),
        redis::Script::new(HAND_RELEASE),
    );
    let mut plain = connection(&redis);
    let mut hand_take = |permits: u32| -> bool {
        let taken: u32 = take.key("shared").arg(permits).invoke(&mut plain).unwrap();
        taken == 1
    };
    assert!(pool.try_set_permits(2).unwrap());

    // The hand-written client excludes the library...
    assert!(hand_take(2));
    assert!(!pool.try_acquire(1).unwrap());
    // ... and wakes its waiter.
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            let got = pool.try_acquire_for(2, PATIENCE).unwrap();
            (got, Instant::now())
        });
        assert!(eventually(PATIENCE, || manager.subscribed_channels() == 1));
        let released_at = Instant::now();
        let mut plain = connection(&redis);
        let _: i64 = give
            .key("shared")
            .key(channel("shared"))
            .arg(2)
            .invoke(&mut plain)
            .unwrap();
        let (got, woke_at) = waiter.join().unwrap();
        assert!(got);
        assert!(woke_at - released_at < Duration::from_secs(1));
    });

    // The library excludes the hand-written client...
    assert!(!hand_take(1));
    // ... and wakes it: its release announces the new count on the documented channel.
    let mut listener = connection(&redis);
    let mut subscribed = listener.as_pubsub();
    subscribed.subscribe(channel("shared")).unwrap();
    subscribed.set_read_timeout(Some(PATIENCE)).unwrap();
    pool.release(2).unwrap();
    let message = subscribed.get_message().unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "2");
    drop(subscribed);
    assert!(hand_take(2));
    assert_left_nothing(&manager, &redis, "shared");
}

#[test]
fn counts_are_set_once_added_to_and_drained() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let pool = manager.semaphore("counts");
    assert_eq!(pool.available_permits().unwrap(), 0);
    assert!(!pool.try_acquire(1).unwrap(), "no semaphore, no permits");
    assert!(pool.try_set_permits(4).unwrap());
    assert!(!pool.try_set_permits(9).unwrap(), "set once");
    assert_eq!(pool.add_permits(3).unwrap(), 7);
    assert_eq!(pool.add_permits(-2).unwrap(), 5);
    assert!(pool.try_acquire(5).unwrap());
    assert!(!pool.try_acquire(1).unwrap());
    pool.release(3).unwrap();
    assert_eq!(pool.drain_permits().unwrap(), 3);
    assert_eq!(pool.drain_permits().unwrap(), 0);
    assert_eq!(pool.available_permits().unwrap(), 0);
    // Redisson's layout: the count is a plain string under the name.
    assert!(redis
        .command(&["GET", "counts"])
        .unwrap()
        .ends_with("\r\n0\r\n"));
    assert_left_nothing(&manager, &redis, "counts");
}

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let pool = manager.semaphore("strict");
    assert!(pool.try_set_permits(3).unwrap());
    let invalid = |outcome: redlease::Result<()>| {
        assert!(
            matches!(outcome, Err(Error::InvalidArgument(_))),
            "{outcome:?}"
        );
    };
    invalid(pool.acquire(0));
    invalid(pool.try_acquire(0).map(drop));
    invalid(pool.try_acquire_for(0, Duration::from_secs(1)).map(drop));
    invalid(pool.try_acquire_for(1, Duration::MAX).map(drop));
    invalid(pool.release(0));
    invalid(pool.add_permits(0).map(drop));
    invalid(pool.add_permits(-4).map(drop));
    invalid(pool.add_permits(i64::MIN).map(drop));
    invalid(pool.add_permits(i64::MAX).map(drop));
    invalid(manager.semaphore("").available_permits().map(drop));
    invalid(manager.semaphore("").acquire(1));
    assert_eq!(pool.available_permits().unwrap(), 3, "nothing changed");
    redis
        .command(&["SET", "strict", "9007199254740990"])
        .unwrap();
    invalid(pool.release(2));
    pool.release(1).unwrap();

    // A name taken by a key of another kind.
    redis.command(&["LPUSH", "a-list", "x"]).unwrap();
    redis.command(&["SET", "a-word", "many"]).unwrap();
    for name in ["a-list", "a-word"] {
        let other = manager.semaphore(name);
        let wrong = |outcome: redlease::Result<()>| {
            assert!(
                matches!(&outcome, Err(Error::WrongType { name: named }) if named == name),
                "{name}: {outcome:?}"
            );
        };
        wrong(other.try_acquire(1).map(drop));
        wrong(
            other
                .try_acquire_for(1, Duration::from_millis(10))
                .map(drop),
        );
        wrong(other.release(1));
        wrong(other.add_permits(-1).map(drop));
        wrong(other.try_set_permits(1).map(drop));
        wrong(other.available_permits().map(drop));
        wrong(other.drain_permits().map(drop));
    }
    assert!(redis
        .command(&["GET", "a-word"])
        .unwrap()
        .ends_with("many\r\n"));
    assert_left_nothing(&manager, &redis, "strict");
}

#[test]
fn redis_down_or_a_manager_shut_down_is_an_error_not_a_hang() {
    let mut redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let pool = manager.semaphore("gone");
    assert!(pool.try_set_permits(0).unwrap());
    redis.kill().unwrap();
    let started = Instant::now();
    let outcome = pool.try_acquire_for(1, Duration::from_secs(2));
    assert!(
        matches!(outcome, Err(Error::Unreachable(_) | Error::Timeout(_))),
        "{outcome:?}"
    );
    assert!(started.elapsed() < PATIENCE);
    let outcome = pool.release(1);
    assert!(matches!(
        outcome,
        Err(Error::Unreachable(_) | Error::Timeout(_))
    ));
    manager.shutdown();
    assert!(matches!(pool.acquire(1), Err(Error::ShutDown)));
}

#[test]
fn a_guard_gives_its_permits_back_at_the_end_of_a_scope_on_an_early_return_and_on_a_panic() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let slots = manager.semaphore("guarded");
    assert!(slots.try_set_permits(PERMITS).unwrap());
    let available = || slots.available_permits().unwrap();
    {
        let taken = slots.acquire_guarded(2).unwrap();
        assert_eq!(taken.permits(), 2);
        assert_eq!(taken.semaphore().name(), "guarded");
        assert_eq!(available(), 1);
        assert!(slots.try_acquire_guarded(2).unwrap().is_none());
    }
    assert_eq!(available(), 3);
    // An early return with `?`: the guard goes with the frame.
    let fails_midway = |slots: &redlease::Semaphore| -> redlease::Result<()> {
        let _taken = slots.acquire_guarded(3)?;
        slots.acquire(0)
    };
    assert!(matches!(
        fails_midway(&slots),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(available(), 3);
    // A panic in another thread (counted permits have no owner: the guard may move).
    let deadline = Instant::now() + PATIENCE;
    let moved = slots.try_acquire_guarded_until(3, deadline).unwrap();
    let moved = moved.expect("three permits are free");
    let worker = std::thread::spawn(move || {
        let _moved = moved;
        panic!("a worker fails while it holds the permits");
    });
    assert!(worker.join().is_err());
    assert_eq!(available(), 3);
    // `release` says how it went; `forget` keeps the permits taken.
    slots.acquire_guarded(1).unwrap().release().unwrap();
    let kept = slots.try_acquire_guarded_for(2, PATIENCE).unwrap();
    assert_eq!(kept.expect("two permits are free").forget(), 2);
    assert_eq!(available(), 1);
    slots.release(2).unwrap();
    assert_eq!(available(), 3);
    assert!(matches!(
        slots.acquire_guarded(0),
        Err(Error::InvalidArgument(_))
    ));
    assert_left_nothing(&manager, &redis, "guarded");
}

/// A drop does not block for the outage: its release, unanswered, is handed to the cleanup
/// thread, whose resends carry the same request id as the copy sent into the pause (which
/// the server may run when it wakes): the permits come back, once.
#[test]
fn a_guard_dropped_while_redis_is_paused_gives_its_permits_back_once_when_it_wakes() {
    let redis = server();
    let manager = redlease::LockManager::builder(redis.url())
        .response_timeout(Duration::from_secs(1))
        .outage_grace(PATIENCE)
        .build()
        .unwrap();
    let slots = manager.semaphore("paused");
    assert!(slots.try_set_permits(PERMITS).unwrap());
    let taken = slots.acquire_guarded(2).unwrap();
    redis.pause().unwrap();
    let dropped_at = Instant::now();
    drop(taken);
    // One response timeout, not the outage.
    assert!(dropped_at.elapsed() < Duration::from_secs(5));
    assert!(eventually(PATIENCE, || manager.stats().cleanup_pending == 1));
    let sent = manager.stats().cleanup_done;
    redis.resume().unwrap();
    assert!(eventually(PATIENCE, || {
        let stats = manager.stats();
        stats.cleanup_pending == 0 && stats.cleanup_done > sent
    }));
    assert_eq!(slots.available_permits().unwrap(), u64::from(PERMITS));
    assert_eq!(manager.stats().cleanup_abandoned, 0);
}
