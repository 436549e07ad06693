//! Many threads in many processes on a few locks: exclusion is exact, waiters are woken by
//! releases on one shared listener connection, and nothing is left behind.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    assert_nothing_left, child_role, env, eventually, manager, manager_for_url, release_channels,
    run_children, server,
};
use redis::Commands;

const PROCESSES: usize = 4;
const THREADS: usize = 4;
const INCREMENTS: usize = 40;

#[test]
fn a_non_atomic_counter_is_exact_across_processes_and_threads() {
    let redis = server();
    run_children(
        PROCESSES,
        "counter_process",
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
