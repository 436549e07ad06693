//! One test per defect found under faults, named after it: each failed before its fix.

use crate::common;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::eventually;
use redlease::{Error, LockManager, LostReason};

/// Thread T takes `x` (chain 1), someone force-releases it, T takes it again (chain 2): the
/// release of chain 1 must answer `NotHeld` and leave chain 2's hold alone. (The holder id is
/// the same for both chains; the release carries its chain's token.)
#[test]
fn a_release_of_an_old_hold_leaves_the_newer_hold_of_the_same_thread_alone() {
    let server = common::server();
    let manager = common::manager(&server, Duration::from_secs(30));
    let other = common::manager(&server, Duration::from_secs(30));
    let lock = manager.lock("x");
    let first = lock.lock().unwrap();
    let lost = first.lost_signal();
    assert!(other.lock("x").break_lock().unwrap());
    assert_eq!(
        lost.recv_timeout(Duration::from_secs(10)),
        Ok(LostReason::ForceReleased)
    );
    let second = lock.lock().unwrap();
    assert!(second.fencing_token() > first.fencing_token());

    assert!(
        matches!(first.unlock(), Err(Error::NotHeld { .. })),
        "the old chain's release must be refused"
    );
    assert_eq!(lock.hold_count().unwrap(), 1, "the new hold is intact");
    assert!(other.lock("x").try_lock().unwrap().is_none());
    assert!(second.check().is_ok());
    second.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

/// A manager of `url` that gives up on an answer after 500 ms.
fn impatient(url: String) -> redlease::LockManagerBuilder {
    LockManager::builder(url)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(500))
        .watchdog_timeout(Duration::from_secs(30))
}

fn impatient_manager(server: &common::RedisServer) -> LockManager {
    impatient(server.url()).build().unwrap()
}

/// An acquisition whose answer never came (Redis paused past the response timeout) must not
/// leave a hold behind that later acquisitions of the thread re-enter and others wait for.
#[test]
fn an_unanswered_acquisition_leaves_no_ghost_hold() {
    let server = common::server();
    let manager = impatient_manager(&server);
    let lock = manager.lock("ghost");
    // Scripts loaded and a connection idle, so the attempt below is one EVALSHA.
    lock.lock().unwrap().unlock().unwrap();

    server.pause().unwrap();
    let attempt = lock.try_lock();
    server.resume().unwrap();
    assert!(
        matches!(attempt, Err(Error::Timeout(_))),
        "the attempt times out: {attempt:?}"
    );
    // Once Redis runs the late acquisition, it also runs its undo, queued behind it.
    assert!(
        eventually(Duration::from_secs(3), || !lock.is_locked().unwrap()),
        "a ghost hold was left: count {:?}, ttl {:?}",
        lock.hold_count(),
        lock.remaining_ttl()
    );

    let mut last_token = 0;
    for _ in 0..5 {
        let guard = lock.lock().unwrap();
        assert!(
            guard.fencing_token() > last_token,
            "a fresh chain each time"
        );
        last_token = guard.fencing_token();
        assert_eq!(lock.hold_count().unwrap(), 1);
        guard.unlock().unwrap();
        assert!(
            !lock.is_locked().unwrap(),
            "the last release frees the lock"
        );
    }
    let other = common::manager(&server, Duration::from_secs(30));
    assert!(other.lock("ghost").try_lock().unwrap().is_some());
}

/// A ghost level under a held chain (an unanswered reentrant acquisition that ran late) must
/// not keep the lock once the chain's last guard is gone.
#[test]
fn an_unanswered_reentrant_acquisition_does_not_outlive_the_chain() {
    let server = common::server();
    let manager = impatient_manager(&server);
    let lock = manager.lock("ghost-level");
    let outer = lock.lock().unwrap();
    server.pause().unwrap();
    let attempt = lock.try_lock();
    server.resume().unwrap();
    assert!(matches!(attempt, Err(Error::Timeout(_))), "{attempt:?}");
    assert!(
        eventually(Duration::from_secs(3), || lock.hold_count().unwrap() == 1),
        "the late level was not taken back: count {:?}",
        lock.hold_count()
    );
    outer.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

/// One lock's key overwritten with another type must not fail the renewal of the others in
/// its batch; it alone is reported, as no longer held.
#[test]
fn one_clobbered_key_does_not_poison_its_renewal_batch() {
    let server = common::server();
    let (manager, reports) = common::reporting_manager(&server, Duration::from_millis(1_500));
    let names: Vec<String> = (0..20).map(|index| format!("batch:{index}")).collect();
    let guards: Vec<_> = names
        .iter()
        .map(|name| manager.lock(name).lock().unwrap())
        .collect();
    server.command(&["SET", "batch:7", "1"]).unwrap();

    let (lost, _) = reports
        .recv_timeout(Duration::from_secs(5))
        .expect("the clobbered lock is reported");
    assert_eq!(lost.name, "batch:7");
    assert_eq!(lost.reason, LostReason::NotHeldAnymore);
    // Three more renewal intervals: no other lock is lost.
    assert!(
        reports.recv_timeout(Duration::from_millis(1_500)).is_err(),
        "an untouched lock was reported lost"
    );
    for (name, guard) in names.iter().zip(&guards) {
        if name != "batch:7" {
            assert!(guard.check().is_ok(), "{name} lost");
            assert!(manager.lock(name).hold_count().unwrap() == 1, "{name} gone");
        }
    }
    drop(guards);
    assert_eq!(manager.watched_locks(), 0);
}

/// `x` and `{x}` share a release channel (Redisson's naming): a release of `x` must wake the
/// waiter of `x`, even when a waiter of `{x}` waits on the same channel in the same process.
#[test]
fn a_release_wakes_a_waiter_of_the_freed_lock_when_names_share_a_channel() {
    let server = common::server();
    let holder = common::manager(&server, Duration::from_secs(30));
    let waiters = common::manager(&server, Duration::from_secs(30));
    let plain = holder.lock("x").lock().unwrap();
    let tagged = holder.lock("{x}").lock().unwrap();

    let scripts_run = || -> u64 {
        let stats = server.command(&["INFO", "commandstats"]).unwrap();
        stats
            .lines()
            .filter(|line| line.starts_with("cmdstat_evalsha:"))
            .find_map(|line| line.split("calls=").nth(1)?.split(',').next()?.parse().ok())
            .unwrap_or(0)
    };
    // Both waiters wait: the one of `{x}` first, so that it is first in line on the channel.
    let spawn_waiter = |name: &'static str| {
        let lock = waiters.lock(name);
        let (done, finished) = mpsc::channel();
        let before = scripts_run();
        let waiter = thread::spawn(move || {
            let guard = lock.try_lock_for(Duration::from_secs(20)).unwrap();
            done.send(Instant::now()).unwrap();
            guard.is_some()
        });
        // A waiter subscribes between its first and second attempt, then sleeps.
        assert!(eventually(Duration::from_secs(5), || scripts_run() >= before + 2));
        (waiter, finished)
    };
    let (tagged_waiter, _tagged_done) = spawn_waiter("{x}");
    let (plain_waiter, plain_done) = spawn_waiter("x");

    let released_at = Instant::now();
    plain.unlock().unwrap();
    let woken_at = plain_done
        .recv_timeout(Duration::from_secs(25))
        .expect("the waiter of x ends");
    assert!(
        woken_at - released_at < Duration::from_secs(5),
        "the waiter of x slept {:?} past the release",
        woken_at - released_at
    );
    assert!(plain_waiter.join().unwrap());
    tagged.unlock().unwrap();
    assert!(tagged_waiter.join().unwrap());
}

/// With one of five masters frozen, a Redlock attempt whose vote the other four settle does
/// not wait for it, and what the frozen one grants late is taken back once it runs again.
#[test]
fn a_silent_master_does_not_hold_up_a_settled_redlock_vote() {
    let servers: Vec<_> = thread::scope(|scope| {
        let starting: Vec<_> = (0..5).map(|_| scope.spawn(common::server)).collect();
        starting.into_iter().map(|s| s.join().unwrap()).collect()
    });
    let managers: Vec<LockManager> = servers
        .iter()
        .map(|server| common::manager(server, Duration::from_secs(30)))
        .collect();
    let lock = redlease::RedLock::builder(managers.iter().map(|manager| manager.lock("vote")))
        .attempt_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    lock.lock().unwrap().unlock().unwrap();

    servers[0].pause().unwrap();
    // The first attempt learns that the master is silent (it may wait for it once).
    lock.lock().unwrap().unlock().unwrap();
    let started = Instant::now();
    for _ in 0..10 {
        let guard = lock.lock().unwrap();
        assert_eq!(guard.held_members(), 4);
        guard.unlock().unwrap();
    }
    let took = started.elapsed();
    servers[0].resume().unwrap();
    // Each attempt would wait the 2 s attempt timeout for the frozen master.
    assert!(
        took < Duration::from_secs(5),
        "10 acquisitions took {took:?} with a silent master"
    );
    // The requests it got while frozen run now, each followed by its undo.
    assert!(
        eventually(Duration::from_secs(5), || servers[0]
            .command(&["EXISTS", "vote"])
            .unwrap()
            .starts_with(":0")),
        "a late grant on the frozen master was left"
    );
    // Probed once a second, the master that came back is trusted and held again.
    assert!(
        eventually(Duration::from_secs(5), || {
            let guard = lock.lock().unwrap();
            let held = guard.held_members();
            guard.unlock().unwrap();
            held == 5
        }),
        "the master that came back is not used again"
    );
}

/// A port taken between the fixture's choice and the server's bind answers `PING` from
/// someone else's server: the fixture took that for its own, and the test then shared a server
/// that its owner killed under it (CI: `Connection reset by peer` in the middle of a test).
#[test]
fn a_server_fixture_never_takes_someone_elses_server_for_its_own() {
    let mut ours = common::server();
    let port = ours.port();
    ours.kill().unwrap();
    let program =
        std::env::var_os("REDLEASE_REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
    let theirs = common::KillOnDrop::spawn(
        std::process::Command::new(program)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    );
    let answers = eventually(Duration::from_secs(10), || {
        ours.command(&["PING"])
            .is_ok_and(|reply| reply.starts_with("+PONG"))
    });
    assert!(answers, "their server never answered on port {port}");
    let restarted = ours.restart();
    let error = restarted.expect_err("the port answers for another process");
    assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse, "{error}");
    assert_eq!(ours.pid(), None);
    drop(theirs);
}

/// A manager through `proxy` that gives up on an answer after 500 ms and sends a change
/// once (no outage grace): a change held in the proxy reaches Redis only when the test
/// delivers it.
fn sending_once_through(proxy: &redlease_testing::CuttingProxy) -> LockManager {
    let builder = impatient(proxy.url());
    builder.outage_grace(Duration::ZERO).build().unwrap()
}

/// Unlocks `guard` of the lock `name` with its release held in `proxy` (the only call that
/// names a release receipt): no answer comes, and the release is not sent again.
fn unlock_held_up(
    proxy: &redlease_testing::CuttingProxy,
    name: &str,
    guard: redlease::LockGuard,
) -> redlease_testing::Held {
    let held = proxy.hold_next(&["EVALSHA", name, "redisson_unlock_latch"]);
    let unlocked = guard.unlock();
    assert!(
        matches!(unlocked, Err(Error::Indeterminate { .. })),
        "{unlocked:?}"
    );
    assert!(held.wait_until_held(Duration::ZERO));
    held
}

/// Found by the model's search of the upgradable read: an upgrade's write lock is released,
/// and the release is held up in the network (no answer comes, and with no outage grace it is
/// not sent again). The reader upgrades again: its try finds the chain still writing and
/// takes the write lock over. The held release, delivered then, freed the second upgrade's
/// write lock (it named the chain's field, not the grant), and a reader came in beside the
/// writer. An upgrade's release now names the try whose grant it releases.
#[test]
fn a_late_release_of_an_upgrade_leaves_the_next_upgrade_alone() {
    let server = common::server();
    let proxy = redlease_testing::CuttingProxy::start(server.port()).unwrap();
    let manager = sending_once_through(&proxy);
    let name = "late-upgrade-release";
    let upgradable = manager.read_write_lock(name).upgradable().lock().unwrap();
    // Scripts loaded, so that the release below is one EVALSHA.
    upgradable.upgrade().unwrap().unlock().unwrap();
    let first = upgradable.upgrade().unwrap();
    let first_token = first.fencing_token();
    let held = unlock_held_up(&proxy, name, first);
    let second = upgradable.upgrade().unwrap();
    let reply = String::from_utf8_lossy(&held.deliver().unwrap()).into_owned();
    let other = common::manager(&server, Duration::from_secs(30));
    let reader = other.read_write_lock(name).read().try_lock().unwrap();
    assert!(reader.is_none(), "a reader came in beside the writer");
    assert!(
        reply.starts_with("$-1") || reply.starts_with('_'),
        "not held: {reply:?}"
    );
    assert!(second.check().is_ok());
    assert!(second.fencing_token() > first_token, "a grant of its own");
    second.unlock().unwrap();
    assert!(other
        .read_write_lock(name)
        .read()
        .try_lock()
        .unwrap()
        .is_some());
}

/// A thread that held the write lock read by its writer's chain (its read levels shared the
/// writer's holder id). Its read level is released, and the release is held up in the
/// network (no answer comes, and with no outage grace it is not sent again); the thread
/// reads again, by the same holder id. The held release, delivered then, took that new read
/// level away: once the thread let go of the write lock, the lock was free while the thread
/// still read, and a writer came in beside it. A writer's thread now reads by a chain of its
/// own each time (the script lets it in by the writer's field).
#[test]
fn a_late_release_of_a_writers_read_level_leaves_its_next_read_alone() {
    let server = common::server();
    let proxy = redlease_testing::CuttingProxy::start(server.port()).unwrap();
    let manager = sending_once_through(&proxy);
    let name = "late-writers-read-release";
    let lock = manager.read_write_lock(name);
    let writing = lock.write().lock().unwrap();
    // Scripts loaded, so that the release below is one EVALSHA.
    lock.read().lock().unwrap().unlock().unwrap();
    let first = lock.read().lock().unwrap();
    let held = unlock_held_up(&proxy, name, first);
    let reading = lock.read().lock().unwrap();
    let reply = String::from_utf8_lossy(&held.deliver().unwrap()).into_owned();
    writing.unlock().unwrap();
    let other = common::manager(&server, Duration::from_secs(30));
    let writer = other.read_write_lock(name).write().try_lock().unwrap();
    assert!(writer.is_none(), "a writer came in beside the reader");
    // The late release freed the first read's own chain, and the lock stayed held.
    assert_eq!(reply, ":0\r\n");
    assert!(reading.check().is_ok());
    reading.unlock().unwrap();
    assert!(other
        .read_write_lock(name)
        .write()
        .try_lock()
        .unwrap()
        .is_some());
}
