//! Many threads in many processes on a few locks: exclusion is exact, waiters are woken by
//! releases on one shared listener connection, and nothing is left behind.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    assert_nothing_left, child_role, env, eventually, manager, manager_for_url, release_channels,
    run_children, server,
};
use redis::Commands;
use redlease_testing::CuttingProxy;

const PROCESSES: usize = 4;
const THREADS: usize = 4;
const INCREMENTS: usize = 40;

#[test]
fn a_non_atomic_counter_is_exact_across_processes_and_threads() {
    let redis = server();
    run_children(
        PROCESSES,
        "contention::counter_process",
        "count",
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    let total = redis.command(&["GET", "counter"]).unwrap();
    let expected = PROCESSES * THREADS * INCREMENTS;
    assert!(
        total.ends_with(&format!("\r\n{expected}\r\n")),
        "counter: {total:?}"
    );
    assert!(
        release_channels(&redis).starts_with("*0"),
        "{}",
        release_channels(&redis)
    );
}

/// Child side of the test above: four threads that GET and SET the counter under the lock.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn counter_process() {
    if child_role().as_deref() != Some("count") {
        return;
    }
    let url = env("REDLEASE_TEST_URL");
    let manager = manager_for_url(&url, Duration::from_secs(5));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let lock = manager.lock("counter-lock");
            let url = url.clone();
            std::thread::spawn(move || {
                let mut redis = redis::Client::open(url).unwrap().get_connection().unwrap();
                for _ in 0..INCREMENTS {
                    let _guard = lock.lock().unwrap();
                    let value: Option<u64> = redis.get("counter").unwrap();
                    std::thread::yield_now();
                    let _: () = redis.set("counter", value.unwrap_or(0) + 1).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(manager.watched_locks(), 0);
    assert!(eventually(Duration::from_secs(5), || manager
        .subscribed_channels()
        == 0));
}

#[test]
fn thirty_two_threads_on_five_names_share_one_listener_and_leave_nothing() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let names: Vec<String> = (0..5).map(|i| format!("stress:{i}")).collect();
    let inside: Arc<Vec<AtomicBool>> = Arc::new((0..5).map(|_| AtomicBool::new(false)).collect());
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..32)
        .map(|thread| {
            let locks: Vec<_> = names.iter().map(|name| manager.lock(name)).collect();
            let inside = Arc::clone(&inside);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                for round in 0..25 {
                    let which = (thread * 7 + round * 3) % locks.len();
                    let guard = locks[which].lock().unwrap();
                    assert!(!inside[which].swap(true, Ordering::SeqCst), "two holders");
                    std::thread::sleep(Duration::from_micros(200));
                    inside[which].store(false, Ordering::SeqCst);
                    guard.unlock().unwrap();
                }
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    // While they contend, the process has one subscribed connection, whatever the waiters.
    let mut most_subscribed_clients = 0;
    while done.load(Ordering::SeqCst) < 32 {
        let clients = redis
            .command(&["CLIENT", "LIST", "TYPE", "pubsub"])
            .unwrap();
        most_subscribed_clients = most_subscribed_clients.max(clients.matches("id=").count());
        std::thread::sleep(Duration::from_millis(20));
    }
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(most_subscribed_clients, 1);
    assert_nothing_left(&manager, &redis);
    for name in &names {
        assert!(!manager.lock(name).is_locked().unwrap());
    }
}

/// How many clients the server has connected now (`INFO clients`).
fn connected_clients(redis: &common::RedisServer) -> usize {
    redis
        .command(&["INFO", "clients"])
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("connected_clients:"))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// A burst of threads that all start waiting at once never opens more command connections
/// than the manager's bound: the others wait for a connection, and every thread still gets
/// its lock.
#[test]
fn a_burst_of_waiters_opens_no_more_connections_than_the_bound() {
    const THREADS: usize = 64;
    const BOUND: usize = 4;
    let redis = server();
    let manager = redlease::LockManager::builder(redis.url())
        .max_connections(BOUND)
        .build()
        .unwrap();
    let start = std::sync::Barrier::new(THREADS + 1);
    let running = AtomicBool::new(true);
    let most = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while running.load(Ordering::SeqCst) {
                most.fetch_max(connected_clients(&redis), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|index| {
                let (manager, start) = (&manager, &start);
                scope.spawn(move || {
                    let lock = manager.lock(&format!("burst:{}", index % 8));
                    start.wait();
                    let guard = lock.try_lock_for(Duration::from_secs(30)).unwrap();
                    guard.expect("taken").unlock().unwrap();
                })
            })
            .collect();
        start.wait();
        for worker in workers {
            worker.join().unwrap();
        }
        running.store(false, Ordering::SeqCst);
    });
    // The command connections, the pub/sub connection, and the sampler's own.
    let most = most.load(Ordering::SeqCst);
    assert!(most <= BOUND + 2, "{most} clients connected at once");
}

/// A call that finds every connection in use, held by a call whose answer does not come,
/// waits for one within its connect timeout and fails with `Timeout`: never a hang.
#[test]
fn a_call_that_finds_every_connection_in_use_times_out() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = bounded_manager(&proxy, 1);
    assert!(!manager.lock("in-flight").is_locked().unwrap());
    let held = proxy.hold_next(&["in-flight"]);
    std::thread::scope(|scope| {
        let in_flight = scope.spawn(|| manager.lock("in-flight").is_locked());
        assert!(held.wait_until_held(Duration::from_secs(10)));
        let started = Instant::now();
        let waited = manager.lock("other").is_locked();
        let took = started.elapsed();
        assert!(
            matches!(waited, Err(redlease::Error::Timeout(_))),
            "{waited:?}"
        );
        assert!(took < Duration::from_secs(3), "waited {took:?}");
        held.deliver().unwrap();
        assert!(!in_flight.join().unwrap().unwrap());
    });
    assert!(
        !manager.lock("other").is_locked().unwrap(),
        "a connection is free again"
    );
}

/// A manager through `proxy` that may open `bound` connections, with a 500 ms connect
/// timeout.
fn bounded_manager(proxy: &CuttingProxy, bound: usize) -> redlease::LockManager {
    redlease::LockManager::builder(proxy.url())
        .max_connections(bound)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(10))
        .outage_grace(Duration::ZERO)
        .build()
        .unwrap()
}

/// A group's attempt that needs a new connection while the pool's every place is taken waits
/// for a place; a connection given back idle then is closed for it, instead of the attempt
/// waiting for one to close until its timeout.
#[test]
fn a_group_member_gets_the_place_of_a_connection_given_back_idle() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = bounded_manager(&proxy, 2);
    assert!(!manager.lock("x").is_locked().unwrap());
    let held = proxy.hold_next(&["x"]);
    std::thread::scope(|scope| {
        // One connection in use (its call held back), one idle: both places taken.
        let in_flight = scope.spawn(|| manager.lock("x").is_locked());
        assert!(held.wait_until_held(Duration::from_secs(10)));
        assert!(!manager.lock("y").is_locked().unwrap());
        let group = redlease::MultiLock::builder([manager.lock("a"), manager.lock("b")])
            .attempt_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        // One member takes the idle connection, the other waits for a place; the held call's
        // connection comes back idle meanwhile (or, on a slow machine, before the attempt).
        let attempt = scope.spawn(move || group.try_lock().map(|guard| guard.is_some()));
        std::thread::sleep(Duration::from_millis(300));
        held.deliver().unwrap();
        assert!(!in_flight.join().unwrap().unwrap());
        assert!(attempt.join().unwrap().unwrap(), "the group was not taken");
    });
}

/// A group's request whose idle connection turns out dead (the server restarted) is sent
/// again on a new connection, in the dead one's place: with a bound of one, that place is
/// the only one.
#[test]
fn a_group_request_on_a_dead_connection_is_sent_again_in_its_place() {
    let mut redis = server();
    let manager = redlease::LockManager::builder(redis.url())
        .max_connections(1)
        .build()
        .unwrap();
    let group = redlease::MultiLock::builder([manager.lock("restarted")])
        .attempt_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert!(!manager.lock("restarted").is_locked().unwrap());
    redis.restart().unwrap();
    let started = Instant::now();
    let guard = group.try_lock().unwrap();
    assert!(guard.is_some(), "not taken after {:?}", started.elapsed());
}

/// A group with more members on one server than its manager may open connections to is
/// refused when it is built: an attempt needs a connection per member at once.
#[test]
fn a_group_with_more_members_on_a_server_than_connections_is_refused() {
    let redis = server();
    let manager = redlease::LockManager::builder(redis.url())
        .max_connections(2)
        .build()
        .unwrap();
    let members = ["a", "b", "c"].map(|name| manager.lock(name));
    let refused = redlease::MultiLock::builder(members).build();
    assert!(
        matches!(refused, Err(redlease::Error::InvalidArgument(_))),
        "{refused:?}"
    );
}
