//! The read-write lock: readers together, one writer alone; a writer's release wakes every
//! waiting reader; read and write levels are renewed past the watchdog timeout; a reader
//! cannot upgrade; and the layout is Redisson's.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{assert_nothing_left, eventually, manager, server, RedisServer};
use redis::Commands;
use redlease::Error;

fn connection(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap()
}

/// The read-level timeout keys and read-write channels left on the server.
fn assert_rwlock_clean(server: &RedisServer, name: &str) {
    let mut redis = connection(server);
    let timeouts: Vec<String> = redis.keys("*rwlock_timeout*").unwrap();
    assert!(timeouts.is_empty(), "{timeouts:?}");
    let exists: bool = redis.exists(name).unwrap();
    assert!(!exists, "{name} is still held");
    assert!(eventually(Duration::from_secs(5), || {
        server
            .command(&["PUBSUB", "CHANNELS", "redisson_rwlock*"])
            .unwrap()
            .starts_with("*0")
    }));
}

#[test]
fn readers_hold_together_and_a_writer_waits_for_all_of_them() {
    const READERS: usize = 8;
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(5));
    let other = common::manager(&redis, Duration::from_secs(5));
    let rw = manager.read_write_lock("prices");
    let all_in = Arc::new(Barrier::new(READERS + 1));
    let go = Arc::new(Barrier::new(READERS + 1));
    let inside = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let rw = rw.clone();
            let (all_in, go, inside) = (all_in.clone(), go.clone(), inside.clone());
            std::thread::spawn(move || {
                let guard = rw.read().lock().unwrap();
                inside.fetch_add(1, Ordering::SeqCst);
                all_in.wait(); // every reader holds at once: they overlap
                go.wait();
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().unwrap();
            })
        })
        .collect();
    all_in.wait();
    assert_eq!(inside.load(Ordering::SeqCst), READERS);
    let writer_lock = other.read_write_lock("prices");
    assert!(writer_lock.write().try_lock().unwrap().is_none());
    let writer = std::thread::spawn({
        let inside = inside.clone();
        move || {
            let guard = writer_lock.write().lock().unwrap();
            let readers_inside = inside.load(Ordering::SeqCst);
            // While the writer holds it, nobody else may read or write.
            let reader = writer_lock.clone();
            let excluded = std::thread::spawn(move || {
                reader.read().try_lock().unwrap().is_none()
                    && reader.write().try_lock().unwrap().is_none()
            })
            .join()
            .unwrap();
            guard.unlock().unwrap();
            (readers_inside, excluded)
        }
    });
    go.wait();
    for reader in readers {
        reader.join().unwrap();
    }
    let (readers_inside, excluded) = writer.join().unwrap();
    assert_eq!(
        readers_inside, 0,
        "the writer got in while readers held the lock"
    );
    assert!(excluded);
    assert_rwlock_clean(&redis, "prices");
    assert_nothing_left(&manager, &redis);
    assert_nothing_left(&other, &redis);
}

#[test]
fn a_writer_release_wakes_every_waiting_reader_at_once() {
    const READERS: usize = 6;
    let redis = server();
    // A long watchdog timeout: a reader not woken by the release would sleep until the
    // writer's lease hint, seconds away.
    let manager = manager(&redis, Duration::from_secs(30));
    let writer = common::manager(&redis, Duration::from_secs(30));
    let write = writer.read_write_lock("report").write().lock().unwrap();
    let asked = Arc::new(Barrier::new(READERS + 1));
    let all_in = Arc::new(Barrier::new(READERS));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let rw = manager.read_write_lock("report");
            let (asked, all_in) = (asked.clone(), all_in.clone());
            std::thread::spawn(move || {
                asked.wait();
                let guard = rw.read().lock().unwrap();
                let woken = Instant::now();
                all_in.wait(); // every reader inside together
                drop(guard);
                woken
            })
        })
        .collect();
    asked.wait();
    assert!(eventually(Duration::from_secs(5), || manager
        .subscribed_channels()
        == 1));
    let released = Instant::now();
    write.unlock().unwrap();
    for reader in readers {
        let woken = reader.join().unwrap();
        let after = woken.saturating_duration_since(released);
        assert!(after < Duration::from_secs(5), "a reader waited {after:?}");
    }
    assert_rwlock_clean(&redis, "report");
    assert_nothing_left(&manager, &redis);
    assert_nothing_left(&writer, &redis);
}

#[test]
fn read_and_write_levels_outlive_the_watchdog_timeout_while_held() {
    let redis = server();
    let manager = manager(&redis, Duration::from_millis(900));
    let rival = common::manager(&redis, Duration::from_secs(5));
    let readers = manager.read_write_lock("shelf");
    let writers = manager.read_write_lock("ledger");
    let read_outer = readers.read().lock().unwrap();
    let read_inner = readers.read().lock().unwrap();
    let write = writers.write().lock().unwrap();
    let writer_reads = writers.read().lock().unwrap(); // a writer may read too
    let held_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < held_until {
        assert!(!read_outer.is_lost() && !read_inner.is_lost());
        assert!(!write.is_lost() && !writer_reads.is_lost());
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut raw = connection(&redis);
    let levels: Vec<String> = raw.keys("{shelf}:*:rwlock_timeout:*").unwrap();
    assert_eq!(levels.len(), 2, "{levels:?}");
    assert!(rival
        .read_write_lock("shelf")
        .write()
        .try_lock()
        .unwrap()
        .is_none());
    assert!(rival
        .read_write_lock("ledger")
        .read()
        .try_lock()
        .unwrap()
        .is_none());
    assert_eq!(readers.read().hold_count().unwrap(), 2);
    // The writer lets go of the write lock and keeps its read level: readers may join, a
    // writer may not.
    write.unlock().unwrap();
    assert!(rival
        .read_write_lock("ledger")
        .write()
        .try_lock()
        .unwrap()
        .is_none());
    let joined = std::thread::spawn({
        let rival = rival.clone();
        move || {
            rival
                .read_write_lock("ledger")
                .read()
                .try_lock()
                .unwrap()
                .is_some()
        }
    })
    .join()
    .unwrap();
    assert!(joined);
    drop((read_inner, read_outer, writer_reads));
    assert_rwlock_clean(&redis, "shelf");
    assert_rwlock_clean(&redis, "ledger");
    assert_nothing_left(&manager, &redis);
}

#[test]
fn a_reader_asking_for_the_write_lock_gets_an_error_not_a_deadlock() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(5));
    let rw = manager.read_write_lock("doc");
    let read = rw.read().lock().unwrap();
    let started = Instant::now();
    match rw.write().try_lock_for(Duration::from_secs(30)) {
        Err(Error::WriteWhileReading { name }) => assert_eq!(name, "doc"),
        other => panic!(
            "expected WriteWhileReading, got {:?}",
            other.map(|g| g.is_some())
        ),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(read);
    drop(rw.write().lock().unwrap()); // once the reader let go, the thread may write
    assert_rwlock_clean(&redis, "doc");
    assert_nothing_left(&manager, &redis);
}

#[test]
fn counters_stay_exact_under_mixed_readers_and_writers() {
    const WRITES: usize = 25;
    let redis = server();
    let managers = [
        manager(&redis, Duration::from_secs(5)),
        manager(&redis, Duration::from_secs(5)),
    ];
    let mut threads = Vec::new();
    for (index, manager) in managers.iter().cycle().take(8).enumerate() {
        let rw = manager.read_write_lock("pair");
        let url = redis.url();
        threads.push(std::thread::spawn(move || {
            let mut redis = redis::Client::open(url).unwrap().get_connection().unwrap();
            for _ in 0..WRITES {
                if index % 2 == 0 {
                    // A writer moves both counters, one after the other.
                    let _guard = rw.write().lock().unwrap();
                    let a: u64 = redis.get::<_, Option<u64>>("a").unwrap().unwrap_or(0);
                    let _: () = redis.set("a", a + 1).unwrap();
                    let b: u64 = redis.get::<_, Option<u64>>("b").unwrap().unwrap_or(0);
                    let _: () = redis.set("b", b + 1).unwrap();
                } else {
                    // A reader never sees them apart.
                    let _guard = rw.read().lock().unwrap();
                    let (a, b): (Option<u64>, Option<u64>) =
                        redis::pipe().get("a").get("b").query(&mut redis).unwrap();
                    assert_eq!(a, b, "a reader saw a write half done");
                }
            }
        }));
    }
    for thread in threads {
        thread.join().unwrap();
    }
    let a: u64 = connection(&redis).get("a").unwrap();
    assert_eq!(a, 4 * WRITES as u64);
    assert_rwlock_clean(&redis, "pair");
    for manager in &managers {
        assert_nothing_left(manager, &redis);
    }
}

/// A client that knows only the layout of `../shared/PROTOCOL.md` takes read and write
/// holds with plain commands: it excludes the library's writer and readers, its release
/// message wakes them, and the library's releases wake it.
#[test]
fn a_hand_written_client_of_the_layout_excludes_and_wakes_and_is_woken() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rw = manager.read_write_lock("catalog");
    let mut raw = connection(&redis);

    // A foreign reader: mode read, its count, one timeout key for its level.
    let _: () = redis::pipe()
        .hset("catalog", "mode", "read")
        .hset("catalog", "java:1", 1)
        .pexpire("catalog", 30_000)
        .set_ex("{catalog}:java:1:rwlock_timeout:1", 1, 30)
        .query(&mut raw)
        .unwrap();
    assert!(rw.write().try_lock().unwrap().is_none());
    let reader = std::thread::spawn({
        let rw = rw.clone();
        move || rw.read().try_lock().unwrap().is_some()
    });
    assert!(
        reader.join().unwrap(),
        "readers share with a foreign reader"
    );
    let writer = std::thread::spawn({
        let rw = rw.clone();
        move || drop(rw.write().lock().unwrap())
    });
    // The writer waits, subscribed, behind a lease of 30 s.
    assert!(eventually(Duration::from_secs(5), || manager
        .subscribed_channels()
        == 1));
    let released = Instant::now();
    let _: () = redis::pipe()
        .del("catalog")
        .del("{catalog}:java:1:rwlock_timeout:1")
        .publish("redisson_rwlock:{catalog}", "0")
        .query(&mut raw)
        .unwrap();
    writer.join().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "woken by the lease, not the message"
    );

    // The library's writer holds it: its fields follow the layout, and its release wakes a
    // foreign waiter with '1'.
    let guard = rw.write().lock().unwrap();
    let mode: String = raw.hget("catalog", "mode").unwrap();
    assert_eq!(mode, "write");
    let fields: Vec<String> = raw.hkeys("catalog").unwrap();
    assert!(
        fields
            .iter()
            .any(|field| field.starts_with(manager.client_id()) && field.ends_with(":write")),
        "{fields:?}"
    );
    let mut listener = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut pubsub = listener.as_pubsub();
    pubsub.subscribe("redisson_rwlock:{catalog}").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    guard.unlock().unwrap();
    let message = pubsub.get_message().expect("a waiter is woken");
    assert_eq!(message.get_payload::<String>().unwrap(), "1");
    drop(pubsub);
    drop(listener);
    assert_rwlock_clean(&redis, "catalog");
    assert_nothing_left(&manager, &redis);
}

#[test]
fn a_force_release_frees_readers_and_writer_and_tells_them() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rival = common::manager(&redis, Duration::from_secs(30));
    let rw = manager.read_write_lock("vault");
    let write = rw.write().lock().unwrap();
    let read = rw.read().lock().unwrap();
    let (write_lost, read_lost) = (write.lost_signal(), read.lost_signal());
    assert!(rival.read_write_lock("vault").read().break_lock().unwrap());
    for signal in [write_lost, read_lost] {
        let reason = signal.recv_timeout(Duration::from_secs(5)).expect("told");
        assert_eq!(reason, redlease::LostReason::ForceReleased);
    }
    assert!(matches!(read.unlock(), Err(Error::NotHeld { .. })));
    assert!(matches!(write.unlock(), Err(Error::NotHeld { .. })));
    assert!(rival
        .read_write_lock("vault")
        .write()
        .try_lock()
        .unwrap()
        .is_some());
    assert_nothing_left(&manager, &redis);
}

/// A writer that lets go of the write lock and keeps a short read level hands the lock to
/// readers for as long as that level lasts, not for what was left of the write lease.
#[test]
fn a_writer_turned_reader_keeps_the_lock_only_as_long_as_its_read_level() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rw = manager.read_write_lock("handover");
    let write = rw.write().lock().unwrap();
    let read = rw.read().leased_for(Duration::from_secs(1)).lock().unwrap();
    write.unlock().unwrap();
    let left: i64 = connection(&redis).pttl("handover").unwrap();
    assert!(left > 0 && left <= 1_000, "the lock lives {left} ms more");
    let mode: String = connection(&redis).hget("handover", "mode").unwrap();
    assert_eq!(mode, "read");
    drop(read);
    assert_rwlock_clean(&redis, "handover");
    assert_nothing_left(&manager, &redis);
}
