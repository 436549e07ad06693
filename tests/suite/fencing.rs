//! Fencing: tokens strictly increase across processes and threads and repeat for reentrant
//! levels; a `FencedStore` refuses writes with an older token.

use crate::common;

use std::time::Duration;

use common::{
    assert_nothing_left, child_role, env, manager, manager_for_url, run_children, server,
};
use redis::Commands;
use redlease::Error;

const PROCESSES: usize = 4;
const THREADS: usize = 4;
const ACQUISITIONS: usize = 25;

#[test]
fn tokens_strictly_increase_across_processes_and_repeat_for_reentrant_levels() {
    let redis = server();
    run_children(
        PROCESSES,
        "fencing::token_taker_process",
        "token_taker",
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    // Each holder appended its token while it held the lock: the list is in holding order.
    let tokens: Vec<u64> = connection.lrange("tokens", 0, -1).unwrap();
    assert_eq!(tokens.len(), PROCESSES * THREADS * ACQUISITIONS);
    for pair in tokens.windows(2) {
        assert!(pair[0] < pair[1], "tokens out of order: {pair:?}");
    }
    let manager = manager(&redis, Duration::from_secs(30));
    let guard = manager.lock("fenced").lock().unwrap();
    assert!(guard.fencing_token() > *tokens.last().unwrap());
    guard.unlock().unwrap();
    assert_nothing_left(&manager, &redis);
}

/// Child side of the test above: threads that take the lock, enter it again, and record
/// their token while they hold it.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn token_taker_process() {
    if child_role().as_deref() != Some("token_taker") {
        return;
    }
    let url = env("REDLEASE_TEST_URL");
    let manager = manager_for_url(&url, Duration::from_secs(30));
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let lock = manager.lock("fenced");
            let url = url.clone();
            std::thread::spawn(move || {
                let mut connection = redis::Client::open(url).unwrap().get_connection().unwrap();
                for round in 0..ACQUISITIONS {
                    let outer = if (thread + round) % 2 == 0 {
                        lock.lock().unwrap()
                    } else {
                        lock.leased_for(Duration::from_secs(20)).lock().unwrap()
                    };
                    let inner = lock.lock().unwrap();
                    assert_eq!(inner.fencing_token(), outer.fencing_token());
                    let _: () = connection.rpush("tokens", outer.fencing_token()).unwrap();
                    inner.unlock().unwrap();
                    outer.unlock().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(manager.watched_locks(), 0);
}

#[test]
fn a_fenced_store_takes_equal_or_newer_tokens_and_refuses_older_ones() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let store = manager.fenced_store("balance");
    assert_eq!(store.key(), "balance");
    assert_eq!(store.highest_token().unwrap(), 0);
    assert_eq!(store.get::<String>().unwrap(), None);

    store.set(5, "100").unwrap();
    store.set(5, "120").unwrap(); // the same holder writes again
    assert_eq!(store.get::<u32>().unwrap(), Some(120));
    match store.set(4, "90") {
        Err(Error::StaleToken {
            key,
            token,
            highest,
        }) => assert_eq!((key.as_str(), token, highest), ("balance", 4, 5)),
        other => panic!("{other:?}"),
    }
    assert_eq!(store.get::<String>().unwrap().as_deref(), Some("120"));
    store.set(9, vec![0u8, 255]).unwrap();
    assert_eq!(store.get::<Vec<u8>>().unwrap(), Some(vec![0, 255]));
    assert_eq!(store.highest_token().unwrap(), 9);

    // A delete is fenced too, and leaves the token behind: a stale writer cannot bring the
    // value back.
    assert!(matches!(store.delete(8), Err(Error::StaleToken { .. })));
    store.delete(9).unwrap();
    assert_eq!(store.get::<String>().unwrap(), None);
    assert!(matches!(
        store.set(8, "ghost"),
        Err(Error::StaleToken { .. })
    ));
    assert_eq!(store.highest_token().unwrap(), 9);

    // The value is a plain string anyone can read; the token sits in the same slot.
    store.set(10, "plain").unwrap();
    let raw = redis.command(&["GET", "balance"]).unwrap();
    assert!(raw.ends_with("plain\r\n"), "{raw:?}");
    let fence = redis.command(&["GET", "redlease_fence:{balance}"]).unwrap();
    assert!(fence.ends_with("\r\n10\r\n"), "{fence:?}");

    let tagged = manager.fenced_store("{tenant-7}:balance");
    tagged.set(1, "x").unwrap();
    let fence = redis
        .command(&["EXISTS", "redlease_fence:{tenant-7}:balance"])
        .unwrap();
    assert!(fence.starts_with(":1"), "{fence:?}");

    // Tokens compare exactly over the whole u64 range (no float rounding above 2^53).
    let huge = manager.fenced_store("huge");
    huge.set(u64::MAX - 1, "a").unwrap();
    assert!(matches!(
        huge.set(u64::MAX - 2, "b"),
        Err(Error::StaleToken { highest, .. }) if highest == u64::MAX - 1
    ));
    huge.set(u64::MAX, "c").unwrap();
    assert_eq!(huge.highest_token().unwrap(), u64::MAX);
    assert!(matches!(huge.set(9, "d"), Err(Error::StaleToken { .. })));

    let unnamed = manager.fenced_store("");
    assert!(matches!(
        unnamed.set(1, "x"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        unnamed.get::<String>(),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn the_tokens_of_one_lock_fence_a_store_across_holders() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let lock = manager.lock("export");
    let store = manager.fenced_store("export:state");
    let first = lock.lock().unwrap();
    let first_token = first.fencing_token();
    store.set(first_token, "first").unwrap();
    first.unlock().unwrap();
    let second = lock.lock().unwrap();
    store.set(second.fencing_token(), "second").unwrap();
    assert!(matches!(
        store.set(first_token, "late"),
        Err(Error::StaleToken { .. })
    ));
    second.unlock().unwrap();
    assert_eq!(store.get::<String>().unwrap().as_deref(), Some("second"));
}

/// A fenced store whose key holds something else than a string refuses to write over it
/// (`WrongType`), as reading it does, and leaves it as it was.
#[test]
fn a_fenced_store_refuses_a_key_of_another_type() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    redis.command(&["RPUSH", "fenced:list", "a", "b"]).unwrap();
    let store = manager.fenced_store("fenced:list");
    for outcome in [store.set(1, "value"), store.delete(1)] {
        assert!(
            matches!(&outcome, Err(Error::WrongType { name }) if name == "fenced:list"),
            "{outcome:?}"
        );
    }
    assert!(matches!(
        store.get::<String>(),
        Err(Error::WrongType { .. } | Error::Redis(_))
    ));
    assert_eq!(redis.command(&["LLEN", "fenced:list"]).unwrap(), ":2\r\n");
    assert_eq!(store.highest_token().unwrap(), 0, "no token recorded");
}
