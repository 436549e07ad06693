//! Threads belong to their manager: shutting it down or dropping it joins them.
//! (A binary of its own, so no other test's threads are counted.)

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use common::{eventually, manager, server};

/// Names of this process's live threads that the crate started. A joined thread may still be
/// listed for a moment while the kernel finishes its exit: it has left its memory already
/// (no virtual memory in its `stat`), or is a zombie or dead (`Z`, `X`). It ran to its end,
/// so it does not count.
fn redlease_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| {
            let path = task.ok()?.path();
            let stat = std::fs::read_to_string(path.join("stat")).ok()?;
            // `pid (comm) state ppid ...`: field 3 (the state) follows the last `)`; field 23
            // is the virtual memory size.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let exiting =
                matches!(fields.first(), Some(&"Z" | &"X")) || fields.get(20) == Some(&"0");
            let name = std::fs::read_to_string(path.join("comm")).ok()?;
            (!exiting).then(|| name.trim().to_owned())
        })
        .filter(|name| name.starts_with("redlease-"))
        .collect()
}

#[test]
fn threads_are_named_and_joined_on_drop_and_on_shutdown() {
    let redis = server();
    let first = manager(&redis, Duration::from_secs(30));
    let second = first.clone();
    // A thread names itself once it runs; comm is cut at 15 bytes.
    // The replica count's thread is there for the default acknowledgements.
    let expected = [
        "redlease-cleanu",
        "redlease-pubsub",
        "redlease-replic",
        "redlease-watchd",
    ];
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
    assert_eq!(redlease_threads().len(), 4, "a clone keeps the threads");
    drop(second);
    assert!(redlease_threads().is_empty(), "{:?}", redlease_threads());

    let third = manager(&redis, Duration::from_secs(30));
    let lock = third.lock("held");
    let guard = lock.lock().unwrap();
    third.shutdown();
    assert!(redlease_threads().is_empty(), "{:?}", redlease_threads());
    guard.unlock().unwrap();

    // Without acknowledgements, nothing counts replicas.
    let fourth = redlease::LockManager::builder(redis.url())
        .without_replica_acks()
        .build()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || redlease_threads().len() == 3),
        "{:?}",
        redlease_threads()
    );
    assert!(!redlease_threads().contains(&"redlease-replic".to_owned()));
    drop(fourth);
    assert!(redlease_threads().is_empty(), "{:?}", redlease_threads());
}
