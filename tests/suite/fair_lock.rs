//! The fair lock: waiters of all processes take it in the order they came, a waiter that
//! gives up leaves the queue, a dead waiter is skipped once its place expires, and the
//! layout is Redisson's (a hand-written client following it excludes and is excluded, wakes
//! and is woken).

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    assert_nothing_left, child_role, env, eventually, manager, run_children, server, spawn_child,
    RedisServer,
};
use redis::Commands;
use redlease::LockManager;

const QUEUE: &str = "redisson_lock_queue:{fair}";
const PLACES: &str = "redisson_lock_timeout:{fair}";

fn connection(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap()
}

fn queue_length(server: &RedisServer) -> usize {
    connection(server).llen(QUEUE).unwrap()
}

fn fair_manager(server: &RedisServer, place_timeout: Duration) -> LockManager {
    LockManager::builder(server.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(Duration::from_secs(2))
        .fair_lock_place_timeout(place_timeout)
        .build()
        .unwrap()
}

/// The queue and the places are empty: nobody waits, and nobody left a place behind.
fn assert_queue_clean(server: &RedisServer) {
    let mut redis = connection(server);
    let queue: Vec<String> = redis.lrange(QUEUE, 0, -1).unwrap();
    let places: Vec<String> = redis.zrange(PLACES, 0, -1).unwrap();
    assert!(
        queue.is_empty() && places.is_empty(),
        "{queue:?} {places:?}"
    );
}

#[test]
fn waiters_take_the_lock_in_the_order_they_queued() {
    const WAITERS: usize = 8;
    const HOLD: Duration = Duration::from_millis(50);
    let redis = server();
    let manager = fair_manager(&redis, Duration::from_secs(60));
    let lock = manager.fair_lock("fair");
    let first = lock.lock().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for index in 0..WAITERS {
        let lock = lock.clone();
        let order = Arc::clone(&order);
        threads.push(std::thread::spawn(move || {
            let asked = Instant::now();
            let guard = lock.lock().unwrap();
            order.lock().unwrap().push(index);
            std::thread::sleep(HOLD);
            guard.unlock().unwrap();
            asked.elapsed()
        }));
        // The next waiter comes only once this one is in line.
        assert!(
            eventually(Duration::from_secs(5), || queue_length(&redis) == index + 1),
            "waiter {index} did not queue"
        );
    }
    first.unlock().unwrap();
    let waits: Vec<Duration> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    // The last in line waited for the holds ahead of it, not for leases or places to expire
    // (generous: this machine is shared).
    let last_wait = waits[WAITERS - 1];
    assert!(last_wait < Duration::from_secs(10), "{last_wait:?}");
    assert_queue_clean(&redis);
    assert_nothing_left(&manager, &redis);
}

#[test]
fn try_lock_for_that_runs_out_leaves_the_queue_clean() {
    let redis = server();
    let manager = fair_manager(&redis, Duration::from_secs(60));
    let lock = manager.fair_lock("fair");
    let held = lock.lock().unwrap();
    let waiter = lock.clone();
    let gave_up = std::thread::spawn(move || {
        let asked = Instant::now();
        let taken = waiter.try_lock_for(Duration::from_millis(300)).unwrap();
        (taken.is_none(), asked.elapsed())
    })
    .join()
    .unwrap();
    assert!(gave_up.0, "taken while held");
    assert!(
        gave_up.1 >= Duration::from_millis(300),
        "gave up early: {:?}",
        gave_up.1
    );
    // A try without waiting leaves nothing either.
    let other = std::thread::spawn(move || lock.try_lock().unwrap().is_none())
        .join()
        .unwrap();
    assert!(other);
    assert_queue_clean(&redis);
    held.unlock().unwrap();
    assert_nothing_left(&manager, &redis);
}

#[test]
fn a_waiter_killed_in_line_is_skipped_once_its_place_expires() {
    let redis = server();
    let place = Duration::from_secs(1);
    let manager = fair_manager(&redis, place);
    let lock = manager.fair_lock("fair");
    let held = lock.lock().unwrap();
    let mut child = spawn_child(
        "fair_lock::queued_waiter",
        "queue",
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    assert!(
        eventually(Duration::from_secs(10), || queue_length(&redis) == 1),
        "the child did not queue"
    );
    child.kill().unwrap();
    let next = lock.clone();
    let behind = std::thread::spawn(move || {
        let guard = next.try_lock_for(Duration::from_secs(20)).unwrap();
        let taken = guard.is_some();
        drop(guard);
        taken
    });
    assert!(eventually(Duration::from_secs(5), || queue_length(&redis) == 2));
    let released = Instant::now();
    held.unlock().unwrap();
    assert!(
        behind.join().unwrap(),
        "the waiter behind the dead one never got the lock"
    );
    // The dead waiter's place ran out within about a place timeout (plus the lease it was
    // counted from), not at once and not never.
    let waited = released.elapsed();
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert_queue_clean(&redis);
    assert_nothing_left(&manager, &redis);
}

/// Child side of the test above: queues for the fair lock, and is killed there.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn queued_waiter() {
    if child_role().as_deref() != Some("queue") {
        return;
    }
    let url = env("REDLEASE_TEST_URL");
    let manager = LockManager::builder(url)
        .fair_lock_place_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let _never = manager.fair_lock("fair").lock();
}

#[test]
fn a_counter_is_exact_across_processes_in_fair_turns() {
    let redis = server();
    run_children(
        4,
        "fair_lock::fair_counter_process",
        "count",
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    let total: u64 = connection(&redis).get("fair-counter").unwrap();
    assert_eq!(total, 4 * 8 * 20);
    assert_queue_clean(&redis);
}

/// Child side of the test above: eight threads that GET and SET the counter in turns.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn fair_counter_process() {
    if child_role().as_deref() != Some("count") {
        return;
    }
    let url = env("REDLEASE_TEST_URL");
    let manager = LockManager::builder(url.as_str())
        .response_timeout(Duration::from_secs(2))
        .watchdog_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let lock = manager.fair_lock("fair");
            let url = url.clone();
            std::thread::spawn(move || {
                let mut redis = redis::Client::open(url).unwrap().get_connection().unwrap();
                for _ in 0..20 {
                    let _guard = lock.lock().unwrap();
                    let value: Option<u64> = redis.get("fair-counter").unwrap();
                    let _: () = redis.set("fair-counter", value.unwrap_or(0) + 1).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(manager.watched_locks(), 0);
}

/// A client that knows only the layout of `../shared/PROTOCOL.md`: it takes the fair lock
/// with plain commands, queues itself, and listens on its own channel.
#[test]
fn a_hand_written_client_of_the_layout_excludes_and_wakes_and_is_woken() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let lock = manager.fair_lock("fair");
    let mut raw = connection(&redis);

    // It holds the lock for 30 s: the library's waiter queues behind it, and wakes on its
    // own channel as soon as the hand-written client releases, not when the lease ends.
    let _: () = redis::pipe()
        .hset("fair", "java-client:1", 1)
        .pexpire("fair", 30_000)
        .query(&mut raw)
        .unwrap();
    assert!(lock.try_lock().unwrap().is_none());
    let waiter = lock.clone();
    let waiting = std::thread::spawn(move || waiter.lock().unwrap().fencing_token());
    assert!(eventually(Duration::from_secs(5), || queue_length(&redis) == 1));
    let head: String = raw.lindex(QUEUE, 0).unwrap();
    assert!(head.starts_with(manager.client_id()), "{head}");
    let place: f64 = raw.zscore(PLACES, &head).unwrap();
    assert!(place > 0.0);
    let released = Instant::now();
    let _: () = redis::pipe()
        .del("fair")
        .publish(format!("redisson_lock__channel:{{fair}}:{head}"), "0")
        .query(&mut raw)
        .unwrap();
    let token = waiting.join().unwrap();
    assert!(token > 0);
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "woken by the lease, not the message: {:?}",
        released.elapsed()
    );

    // The library holds it: a hand-written waiter queues, and the release wakes it on its
    // own channel.
    let guard = lock.lock().unwrap();
    let mut listener = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut pubsub = listener.as_pubsub();
    pubsub
        .subscribe("redisson_lock__channel:{fair}:java-client:2")
        .unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _: () = redis::pipe()
        .rpush(QUEUE, "java-client:2")
        .zadd(PLACES, "java-client:2", u64::MAX / 4)
        .query(&mut raw)
        .unwrap();
    let held: bool = raw.hexists("fair", "java-client:2").unwrap();
    assert!(!held);
    guard.unlock().unwrap();
    let message = pubsub.get_message().expect("the next in line is woken");
    assert_eq!(message.get_payload::<String>().unwrap(), "0");
    // The hand-written waiter is at the head: the library does not jump the queue.
    assert!(lock.try_lock().unwrap().is_none());
    drop(pubsub);
    drop(listener);
    let _: () = redis::pipe()
        .lrem(QUEUE, 0, "java-client:2")
        .zrem(PLACES, "java-client:2")
        .query(&mut raw)
        .unwrap();
    assert_queue_clean(&redis);
    assert_nothing_left(&manager, &redis);
}

/// A waiter that keeps asking keeps its place, however long the holds ahead of it last: only
/// waiters that stopped asking expire (Redisson's places expire on a fixed schedule, so live
/// waiters behind a long hold lose their turn).
#[test]
fn live_waiters_keep_their_places_behind_a_hold_longer_than_the_place_timeout() {
    const WAITERS: usize = 4;
    let redis = server();
    // Leases of 600 ms (the waiters' longest sleep), places kept 200 ms.
    let manager = LockManager::builder(redis.url())
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(Duration::from_millis(600))
        .fair_lock_place_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let lock = manager.fair_lock("fair");
    let held = lock.lock().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for index in 0..WAITERS {
        let lock = lock.clone();
        let order = Arc::clone(&order);
        threads.push(std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            order.lock().unwrap().push(index);
            drop(guard);
        }));
        assert!(
            eventually(Duration::from_secs(5), || queue_length(&redis) == index + 1),
            "waiter {index} did not queue"
        );
    }
    // Held for many place timeouts, renewed by the watchdog.
    std::thread::sleep(Duration::from_secs(3));
    assert!(!held.is_lost());
    held.unlock().unwrap();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    assert_queue_clean(&redis);
}
