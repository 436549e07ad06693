//! The upgradable read of a read-write lock: one upgradable reader at a time beside plain
//! readers; an upgrade waits for the plain readers and comes before a writer that waited;
//! clients of Redisson's layout (a writer and a reader following Redisson's rules) are kept
//! out while it holds; and nothing is left behind.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{assert_nothing_left, eventually, manager, server, RedisServer};
use redis::Commands;
use redlease::Error;

fn connection(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap()
}

/// A writer of another client that follows Redisson's rules for the layout: it takes a free
/// lock, enters its own write lock again, and is refused in every other case (answering the
/// lock's PTTL, nil when taken).
const FOREIGN_WRITER: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  return nil
end
return redis.call('pttl', KEYS[1])
";

/// A reader of another client that follows Redisson's rules: it enters a free lock or one in
/// read mode (or one it writes itself), with a timeout key per level.
const FOREIGN_READER: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false or mode == 'read'
    or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
  end
  local level = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':' .. level, 1, 'px', ARGV[1])
  redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
  return nil
end
return redis.call('pttl', KEYS[1])
";

/// Whether the foreign writer `holder` takes the lock `name` (it keeps it if so).
fn foreign_write(redis: &mut redis::Connection, name: &str, holder: &str) -> bool {
    let answer: Option<i64> = redis::Script::new(FOREIGN_WRITER)
        .key(name)
        .arg(30_000)
        .arg(format!("{holder}:write"))
        .invoke(redis)
        .unwrap();
    answer.is_none()
}

/// Whether the foreign reader `holder` enters the lock `name` (it keeps its level if so).
fn foreign_read(redis: &mut redis::Connection, name: &str, holder: &str) -> bool {
    let answer: Option<i64> = redis::Script::new(FOREIGN_READER)
        .key(name)
        .key(format!("{{{name}}}:{holder}:rwlock_timeout"))
        .arg(30_000)
        .arg(holder)
        .arg(format!("{holder}:write"))
        .invoke(redis)
        .unwrap();
    answer.is_none()
}

/// A plain reader of `rw` on a thread of its own, in once this returns, that releases when
/// told on the sender; the thread answers how its release went.
fn plain_reader(
    rw: &redlease::ReadWriteLock,
) -> (
    crossbeam_channel::Sender<()>,
    std::thread::JoinHandle<redlease::Result<()>>,
) {
    let (release, released) = crossbeam_channel::bounded::<()>(0);
    let (reading, reader_in) = crossbeam_channel::bounded::<()>(1);
    let reader = std::thread::spawn({
        let rw = rw.clone();
        move || {
            let guard = rw.read().lock().unwrap();
            reading.send(()).unwrap();
            released.recv().unwrap();
            guard.unlock()
        }
    });
    reader_in.recv().unwrap();
    (release, reader)
}

#[test]
fn two_upgradable_readers_never_hold_together() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 15;
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rw = manager.read_write_lock("catalog");
    let inside = Arc::new(AtomicBool::new(false));
    let entries = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (rw, inside, entries) = (rw.clone(), inside.clone(), entries.clone());
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let guard = rw.upgradable().lock().unwrap();
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "two upgradable holders"
                    );
                    // Plain readers still share it.
                    let reader = std::thread::spawn({
                        let rw = rw.clone();
                        move || rw.read().try_lock().unwrap().is_some()
                    });
                    assert!(reader.join().unwrap(), "a plain reader was kept out");
                    entries.fetch_add(1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(entries.load(Ordering::SeqCst), THREADS * ROUNDS);
    assert_nothing_left(&manager, &redis);
    let mut raw = connection(&redis);
    let timeouts: Vec<String> = raw.keys("*rwlock_timeout*").unwrap();
    assert!(timeouts.is_empty(), "{timeouts:?}");
    assert!(!raw.exists::<_, bool>("catalog").unwrap(), "still held");
}

#[test]
fn an_upgrade_waits_for_the_readers_then_comes_before_a_waiting_writer() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rw = manager.read_write_lock("prices");
    let upgradable = rw.upgradable().lock().unwrap();

    // A plain reader holds the lock beside it.
    let (reader_release, reader) = plain_reader(&rw);

    // A writer of another thread waits (behind both readers), and is the first to wait.
    let (writer_in, writer_entered) = crossbeam_channel::bounded::<()>(1);
    let writer_done = Arc::new(AtomicBool::new(false));
    let writer = std::thread::spawn({
        let (rw, writer_done) = (rw.clone(), writer_done.clone());
        move || {
            let guard = rw.write().lock().unwrap();
            writer_in.send(()).unwrap();
            writer_done.store(true, Ordering::SeqCst);
            guard.unlock().unwrap();
        }
    });
    assert!(eventually(Duration::from_secs(5), || manager
        .stats()
        .waiting
        == 1));

    // The upgrade cannot happen while the plain reader holds.
    assert!(upgradable
        .try_upgrade_for(Duration::from_millis(200))
        .unwrap()
        .is_none());
    // It waits; the reader leaves; the upgrade, not the waiting writer, gets the lock.
    let release_reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        reader_release.send(()).unwrap();
    });
    let writing = upgradable
        .try_upgrade_for(Duration::from_secs(10))
        .unwrap()
        .expect("the upgrade once the reader left");
    release_reader.join().unwrap();
    reader.join().unwrap().unwrap();
    assert!(!writer_done.load(Ordering::SeqCst), "a writer came in");
    assert!(writing.fencing_token() > upgradable.fencing_token());
    let mode: String = connection(&redis).hget("prices", "mode").unwrap();
    assert_eq!(mode, "write");
    // Readers wait while it writes.
    let blocked_reader = std::thread::spawn({
        let rw = rw.clone();
        move || rw.read().try_lock().unwrap().is_none()
    });
    assert!(
        blocked_reader.join().unwrap(),
        "a reader entered the write lock"
    );

    // Downgrading lets readers in again; the writer still waits for the upgradable read.
    upgradable.downgrade(writing).unwrap();
    let reader_again = std::thread::spawn({
        let rw = rw.clone();
        move || rw.read().try_lock().unwrap().is_some()
    });
    assert!(reader_again.join().unwrap());
    assert!(!writer_done.load(Ordering::SeqCst));
    upgradable.unlock().unwrap();
    writer_entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the writer enters once the upgradable read is released");
    writer.join().unwrap();
    assert_nothing_left(&manager, &redis);
}

/// `try_upgrade` tries once: no upgrade while a plain reader holds, the write lock once it
/// left.
#[test]
fn try_upgrade_tries_once() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rw = manager.read_write_lock("once");
    let upgradable = rw.upgradable().lock().unwrap();
    let (release_reader, reader) = plain_reader(&rw);
    assert!(upgradable.try_upgrade().unwrap().is_none());
    release_reader.send(()).unwrap();
    reader.join().unwrap().unwrap();
    let writing = upgradable.try_upgrade().unwrap().expect("no reader left");
    let mode: String = connection(&redis).hget("once", "mode").unwrap();
    assert_eq!(mode, "write");
    upgradable.downgrade(writing).unwrap();
    upgradable.unlock().unwrap();
    assert_nothing_left(&manager, &redis);
}

#[test]
fn clients_of_the_redisson_layout_are_kept_out_while_it_holds_and_while_it_writes() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rw = manager.read_write_lock("ledger");
    let mut raw = connection(&redis);

    let upgradable = rw.upgradable().lock().unwrap();
    assert!(
        !foreign_write(&mut raw, "ledger", "java:1"),
        "a foreign writer entered"
    );
    assert!(
        foreign_read(&mut raw, "ledger", "java:2"),
        "readers share with it"
    );
    // The foreign reader is a plain reader: the upgrade waits for it.
    assert!(upgradable
        .try_upgrade_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    let _: () = redis::pipe()
        .hdel("ledger", "java:2")
        .del("{ledger}:java:2:rwlock_timeout:1")
        .query(&mut raw)
        .unwrap();
    let writing = upgradable.upgrade().unwrap();
    assert!(
        !foreign_write(&mut raw, "ledger", "java:1"),
        "a foreign writer entered"
    );
    assert!(
        !foreign_read(&mut raw, "ledger", "java:3"),
        "a foreign reader entered"
    );
    drop(writing);
    assert!(
        !foreign_write(&mut raw, "ledger", "java:1"),
        "a foreign writer entered"
    );
    drop(upgradable);
    assert!(
        foreign_write(&mut raw, "ledger", "java:1"),
        "the lock was left held"
    );
    let _: () = raw.del("ledger").unwrap();
    assert_nothing_left(&manager, &redis);
}

#[test]
fn a_dead_upgradable_reader_is_replaced_once_its_lease_ends() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rw = manager.read_write_lock("report");
    // A holder that died: its level's lease ran out, its fields stayed.
    let guard = rw
        .upgradable()
        .leased_for(Duration::from_millis(300))
        .lock()
        .unwrap();
    std::mem::forget(guard);
    let other = std::thread::spawn({
        let rw = rw.clone();
        move || {
            let guard = rw
                .upgradable()
                .try_lock_for(Duration::from_secs(10))
                .unwrap();
            guard.is_some()
        }
    });
    assert!(
        other.join().unwrap(),
        "the dead holder's place was never freed"
    );
}

#[test]
fn misuse_is_an_error_not_a_deadlock() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rw = manager.read_write_lock("misuse");
    // A thread that reads cannot also hold the upgradable read (its upgrade would wait for
    // its own reads), and the upgradable reader reads already.
    let reading = rw.read().lock().unwrap();
    assert!(matches!(
        rw.upgradable().try_lock(),
        Err(Error::InvalidArgument(_))
    ));
    drop(reading);
    let upgradable = rw.upgradable().lock().unwrap();
    assert!(matches!(
        rw.read().try_lock(),
        Err(Error::InvalidArgument(_))
    ));
    // Only the holding thread may upgrade.
    std::thread::scope(|scope| {
        let upgraded = scope.spawn(|| {
            let answer = upgradable.try_upgrade_for(Duration::from_secs(1));
            matches!(answer, Err(Error::InvalidArgument(_)))
        });
        assert!(upgraded.join().unwrap(), "upgraded from another thread");
    });
    // A write guard that is not its upgrade.
    let other = manager.read_write_lock("other");
    let foreign = other.write().lock().unwrap();
    assert!(matches!(
        upgradable.downgrade(foreign),
        Err(Error::InvalidArgument(_))
    ));
    // Reentrant, and still upgradable; upgraded, a plain read is refused and leaves the
    // upgradable hold as it was.
    let again = rw.upgradable().lock().unwrap();
    let writing = upgradable.upgrade().unwrap();
    assert!(matches!(
        rw.read().try_lock(),
        Err(Error::InvalidArgument(_))
    ));
    upgradable.downgrade(writing).unwrap();
    drop(again);
    let mut raw = connection(&redis);
    let upgrader: String = raw.hget("misuse", "upgrader").unwrap();
    assert_eq!(upgrader, upgradable.holder_id());
    let writing = upgradable.upgrade().unwrap();
    drop(writing);
    // Freed by force: an upgrade finds its upgradable read gone, and takes nothing.
    rw.read().break_lock().unwrap();
    let outcome = upgradable.upgrade().map(|guard| guard.fencing_token());
    assert!(
        matches!(outcome, Err(Error::LockLost { .. })),
        "{outcome:?}"
    );
    assert!(upgradable.is_lost());
    assert!(!raw.exists::<_, bool>("misuse").unwrap());
    // A writer's thread that takes the upgradable read (by a chain of its own, beside its
    // write lock): its upgrade enters that write lock once more, and goes back.
    let writing = rw.write().lock().unwrap();
    let upgradable = rw.upgradable().lock().unwrap();
    assert_ne!(upgradable.holder_id(), writing.holder_id());
    let again = upgradable.upgrade().unwrap();
    assert_eq!(again.holder_id(), writing.holder_id());
    upgradable.downgrade(again).unwrap();
    assert_eq!(rw.write().hold_count().unwrap(), 1);
    drop(writing);
    drop(upgradable);
    assert!(!raw.exists::<_, bool>("misuse").unwrap());
}

#[test]
fn an_upgrade_waiting_while_its_upgradable_read_is_freed_by_force_takes_nothing() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rw = manager.read_write_lock("forced");
    let upgradable = rw.upgradable().lock().unwrap();
    let (release, reader) = plain_reader(&rw);
    let forcer = std::thread::spawn({
        let rw = rw.clone();
        move || {
            std::thread::sleep(Duration::from_millis(200));
            rw.write().break_lock().unwrap()
        }
    });
    // The upgrade waits for the reader; the force release wakes it, and it finds its hold
    // gone instead of taking a fresh write lock.
    let upgraded = upgradable.try_upgrade_for(Duration::from_secs(10));
    assert!(
        matches!(upgraded, Err(Error::LockLost { .. })),
        "{upgraded:?}"
    );
    assert!(forcer.join().unwrap());
    assert!(!connection(&redis).exists::<_, bool>("forced").unwrap());
    release.send(()).unwrap();
    let released = reader.join().unwrap();
    assert!(
        matches!(released, Err(Error::NotHeld { .. })),
        "{released:?}"
    );
}

#[test]
fn an_upgrade_waiting_for_readers_ends_when_its_handle_is_cancelled() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rw = manager.read_write_lock("cancelled");
    let token = redlease::CancelToken::new();
    let upgradable = rw.upgradable().cancellable_by(&token).lock().unwrap();
    let (release, reader) = plain_reader(&rw);
    let canceller = std::thread::spawn({
        let token = token.clone();
        move || {
            std::thread::sleep(Duration::from_millis(200));
            token.cancel();
        }
    });
    assert!(matches!(upgradable.upgrade(), Err(Error::Cancelled)));
    canceller.join().unwrap();
    // The upgradable read stands, and left no write state behind.
    assert!(!upgradable.is_lost());
    let mode: String = connection(&redis).hget("cancelled", "mode").unwrap();
    assert_eq!(mode, "read");
    release.send(()).unwrap();
    reader.join().unwrap().unwrap();
    upgradable.unlock().unwrap();
    assert_nothing_left(&manager, &redis);
}
