//! Threads belong to their manager: shutting it down or dropping it joins them.
//! (A binary of its own, so no other test's threads are counted.)

mod common;

use std::time::Duration;

use common::{eventually, manager, server};

/// Names of this process's threads that the crate started.
fn redlease_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| name.starts_with("redlease-"))
        .collect()
}

#[test]
fn threads_are_named_and_joined_on_drop_and_on_shutdown() {
    let redis = server();
    let first = manager(&redis, Duration::from_secs(30));
    let second = first.clone();
    // A thread names itself once it runs; comm is cut at 15 bytes.
    let expected = ["redlease-cleanu", "redlease-pubsub", "redlease-watchd"];
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut names = redlease_threads();
            names.sort();
            names == expected
        }),
        "{:?}",
        redlease_threads()
    );
    drop(first.lock("held").lock().unwrap());
    drop(first);
    assert_eq!(redlease_threads().len(), 3, "a clone keeps the threads");
    drop(second);
    assert!(redlease_threads().is_empty(), "{:?}", redlease_threads());

    let third = manager(&redis, Duration::from_secs(30));
    let lock = third.lock("held");
    let guard = lock.lock().unwrap();
    third.shutdown();
    assert!(redlease_threads().is_empty(), "{:?}", redlease_threads());
    guard.unlock().unwrap();
}
