//! Locks over several servers: a Redlock over five masters started here (killed, frozen and
//! restarted by the tests), and multi-locks that take several locks all or nothing.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_nothing_left, child_role, env, eventually, manager_for_url, run_children};
use redis::Commands;
use redlease::{Error, GroupGuard, LockManager, LostReason, MultiLock, RedLock};
use redlease_testing::RedisServer;

const MASTERS: usize = 5;
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);

fn masters(count: usize) -> Vec<RedisServer> {
    (0..count)
        .map(|_| RedisServer::start().expect("start redis-server"))
        .collect()
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

/// One manager per server, with 1 s timeouts and the given watchdog timeout.
fn managers(urls: &[String], watchdog: Duration) -> Vec<LockManager> {
    urls.iter()
        .map(|url| manager_for_url(url, watchdog))
        .collect()
}

fn redlock(managers: &[LockManager], name: &str) -> RedLock {
    RedLock::builder(managers.iter().map(|manager| manager.lock(name)))
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .build()
        .unwrap()
}

#[test]
fn two_masters_down_are_tolerated_three_are_not() {
    let mut servers = masters(MASTERS);
    let watchdog = Duration::from_secs(1);
    let managers = managers(&urls(&servers), watchdog);
    let lock = redlock(&managers, "tolerant");
    let rival_managers = self::managers(&urls(&servers), watchdog);
    let rival = redlock(&rival_managers, "tolerant");
    for server in &mut servers[..2] {
        server.kill().unwrap();
    }

    let guard = lock.lock().unwrap();
    assert_eq!(guard.held_members(), 3);
    // Held for more than two leases: the watchdogs of the three live masters renew it.
    std::thread::sleep(watchdog * 5 / 2);
    assert!(guard.check().is_ok());
    assert!(rival.try_lock().unwrap().is_none());
    guard.unlock().unwrap();

    servers[2].kill().unwrap();
    let started = Instant::now();
    match lock.try_lock_for(Duration::from_secs(30)) {
        Err(Error::NoQuorum {
            reachable,
            required,
            masters,
        }) => assert_eq!((reachable, required, masters), (2, 3, 5)),
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "fails at once, not after the wait: {:?}",
        started.elapsed()
    );

    for server in &mut servers[..3] {
        server.restart().unwrap();
    }
    let guard = lock
        .try_lock_for(Duration::from_secs(10))
        .unwrap()
        .expect("works again once the masters are back");
    assert!(guard.held_members() >= 3);
    guard.unlock().unwrap();
    for (manager, server) in managers.iter().zip(&servers) {
        assert_nothing_left(manager, server);
    }
}

#[test]
fn a_frozen_master_costs_an_attempt_at_most_its_timeout() {
    let servers = masters(MASTERS);
    let managers = managers(&urls(&servers), Duration::from_secs(30));
    let lock = redlock(&managers, "frozen");
    servers[0].pause().unwrap();
    let started = Instant::now();
    let guard = lock.try_lock().unwrap().expect("four masters are enough");
    let took = started.elapsed();
    assert!(
        took < ATTEMPT_TIMEOUT + Duration::from_millis(500),
        "{took:?}"
    );
    assert_eq!(guard.held_members(), 4);
    drop(guard);
    // Again, now that the frozen master (listed first) has no idle connection left.
    let started = Instant::now();
    let guard = lock.try_lock().unwrap().expect("still four masters");
    let took = started.elapsed();
    assert!(
        took < ATTEMPT_TIMEOUT * 2 + Duration::from_millis(500),
        "{took:?}"
    );
    drop(guard);

    servers[1].pause().unwrap();
    servers[2].pause().unwrap();
    let started = Instant::now();
    let outcome = lock.try_lock_for(Duration::from_secs(30));
    let took = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::NoQuorum { .. })),
        "{outcome:?}"
    );
    // One attempt and one release, each bounded by the attempt timeout.
    assert!(
        took < ATTEMPT_TIMEOUT * 2 + Duration::from_millis(500),
        "{took:?}"
    );
    for server in &servers[..3] {
        server.resume().unwrap();
    }
    let guard = lock.try_lock_for(Duration::from_secs(10)).unwrap();
    assert!(guard.is_some());
}

#[test]
fn a_redlock_excludes_across_processes() {
    let servers = masters(MASTERS);
    let urls = urls(&servers).join(",");
    run_children(
        3,
        "redlock::redlock_counter_process",
        "redlock_counter",
        &[("REDLEASE_TEST_URLS", urls)],
    );
    let counter = servers[0].command(&["GET", "counter"]).unwrap();
    assert!(
        counter.ends_with(&format!("\r\n{}\r\n", 3 * 4 * 25)),
        "{counter:?}"
    );
}

/// Child side of the test above: four threads that GET and SET a counter on the first
/// master under the Redlock.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn redlock_counter_process() {
    if child_role().as_deref() != Some("redlock_counter") {
        return;
    }
    let urls: Vec<String> = env("REDLEASE_TEST_URLS")
        .split(',')
        .map(str::to_owned)
        .collect();
    let managers = managers(&urls, Duration::from_secs(30));
    let lock = redlock(&managers, "counting");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let lock = lock.clone();
            let url = urls[0].clone();
            std::thread::spawn(move || {
                let mut connection = redis::Client::open(url).unwrap().get_connection().unwrap();
                for _ in 0..25 {
                    let guard = lock.lock().unwrap();
                    let value: Option<u64> = connection.get("counter").unwrap();
                    let _: () = connection.set("counter", value.unwrap_or(0) + 1).unwrap();
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

/// Each lock handle in a thread of its own takes, holds and releases `rounds` times; no two
/// may hold at once.
fn take_turns<L: Send + 'static>(locks: Vec<L>, rounds: usize, take: fn(&L) -> GroupGuard) {
    let inside = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = locks
        .into_iter()
        .map(|lock| {
            let inside = Arc::clone(&inside);
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    let guard = take(&lock);
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    std::thread::yield_now();
                    inside.store(false, Ordering::SeqCst);
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
fn racing_clients_never_hold_together_and_all_get_through() {
    let servers = masters(MASTERS);
    // Two clients (each its own five managers), two threads each: their attempts collide
    // and split the votes; the jittered retries must sort it out.
    let clients: Vec<RedLock> = (0..2)
        .map(|_| redlock(&managers(&urls(&servers), Duration::from_secs(30)), "race"))
        .collect();
    let contenders = clients
        .iter()
        .flat_map(|client| [client.clone(), client.clone()])
        .collect();
    take_turns(contenders, 30, |lock: &RedLock| {
        lock.try_lock_for(Duration::from_secs(20))
            .unwrap()
            .expect("every contender gets through")
    });
}

#[test]
fn the_watchdog_keeps_a_redlock_and_a_lost_majority_is_reported() {
    let mut servers = masters(MASTERS);
    let watchdog = Duration::from_secs(1);
    let managers = managers(&urls(&servers), watchdog);
    let lock = redlock(&managers, "kept");
    let guard = lock.lock().unwrap();
    let lost = guard.lost_signal();
    std::thread::sleep(watchdog * 5 / 2);
    assert!(guard.check().is_ok(), "renewed past its lease");
    assert_eq!(guard.held_members(), 5);
    for server in &mut servers[..2] {
        server.kill().unwrap();
    }
    // Two members lost: still a majority.
    assert!(eventually(watchdog * 3, || guard.held_members() == 3));
    assert!(guard.check().is_ok());
    servers[2].kill().unwrap();
    let killed_at = Instant::now();
    assert_eq!(
        lost.recv_timeout(Duration::from_secs(10)),
        Ok(LostReason::LeaseExpired)
    );
    assert!(killed_at.elapsed() <= watchdog + Duration::from_millis(500));
    assert!(!lock.is_held_by_current_thread());
    // The two members still held are released; two of five is not the lock.
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
    for manager in &managers {
        assert_eq!(manager.watched_locks(), 0);
    }
}

#[test]
fn redlock_reentrancy_and_fencing_tokens() {
    let servers = masters(3);
    let managers = managers(&urls(&servers), Duration::from_secs(30));
    let lock = redlock(&managers, "fenced");
    // The counters of the masters drift apart: one master has seen many more acquisitions.
    let _ = servers[0].command(&["SET", "redisson_lock_token:{fenced}", "100"]);
    let first = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    assert!(lock.is_held_by_current_thread());
    let first_token = first.fencing_token();
    assert_eq!(first_token, 101);
    assert_eq!(inner.fencing_token(), first_token, "reentrant");
    inner.unlock().unwrap();
    assert!(lock.is_held_by_current_thread(), "one level left");
    first.unlock().unwrap();
    assert!(!lock.is_held_by_current_thread());

    // Without the master that drove the token up, the next holder still gets a higher one.
    servers[0].pause().unwrap();
    let second = lock.lock().unwrap();
    assert_eq!(second.held_members(), 2);
    assert!(second.fencing_token() > first_token);
    servers[0].resume().unwrap();
    second.unlock().unwrap();
}

#[test]
fn bad_groups_get_clear_errors() {
    let servers = masters(2);
    let urls = urls(&servers);
    let managers = managers(&urls, Duration::from_secs(30));
    assert!(matches!(
        RedLock::new(Vec::new()),
        Err(Error::InvalidArgument(_))
    ));
    let twin = manager_for_url(&urls[0], Duration::from_secs(30));
    let duplicate = RedLock::new([managers[0].lock("x"), twin.lock("x")]);
    assert!(
        matches!(duplicate, Err(Error::InvalidArgument(_))),
        "{duplicate:?}"
    );
    assert!(matches!(
        RedLock::new([managers[0].lock(""), managers[1].lock("")]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        MultiLock::new([managers[0].lock("a"), managers[0].lock("a")]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        RedLock::builder([managers[0].lock("x")])
            .attempt_timeout(Duration::ZERO)
            .build(),
        Err(Error::InvalidArgument(_))
    ));
    let single = RedLock::new([managers[0].lock("solo")]).unwrap();
    assert_eq!(single.required(), 1);
    single.lock().unwrap().unlock().unwrap();
}

#[test]
fn a_multilock_is_all_or_nothing() {
    let redis = RedisServer::start().unwrap();
    let manager = manager_for_url(&redis.url(), Duration::from_secs(30));
    let other = manager_for_url(&redis.url(), Duration::from_secs(30));
    let names = ["a", "b", "c"];
    let set = MultiLock::new(names.map(|name| manager.lock(name))).unwrap();
    let blocker = other.lock("b").lock().unwrap();
    assert!(set.try_lock().unwrap().is_none());
    for name in names {
        assert_eq!(
            manager.lock(name).is_locked().unwrap(),
            name == "b",
            "{name}: nothing kept from a failed attempt"
        );
    }
    drop(blocker);
    let guard = set.try_lock().unwrap().expect("all free now");
    for name in names {
        assert!(manager.lock(name).is_locked().unwrap());
    }
    guard.unlock().unwrap();
    for name in names {
        assert!(!manager.lock(name).is_locked().unwrap());
    }
    assert_nothing_left(&manager, &redis);
}

#[test]
fn ten_multilock_contenders_take_turns() {
    let servers = masters(2);
    let urls = urls(&servers);
    let first = manager_for_url(&urls[0], Duration::from_secs(30));
    let second = manager_for_url(&urls[1], Duration::from_secs(30));
    let set = MultiLock::new([first.lock("x"), first.lock("y"), second.lock("z")]).unwrap();
    take_turns(vec![set; 10], 10, |set: &MultiLock| set.lock().unwrap());
    assert_nothing_left(&first, &servers[0]);
    assert_nothing_left(&second, &servers[1]);
}

#[test]
fn an_old_guard_dropped_after_retaking_leaves_the_new_hold_alone() {
    let servers = masters(3);
    let managers = managers(&urls(&servers), Duration::from_secs(30));
    let lock = redlock(&managers, "retaken");
    let old = lock.lock().unwrap();
    let lost = old.lost_signal();
    // Someone frees two of the three members.
    let others = self::managers(&urls(&servers), Duration::from_secs(30));
    assert!(others[1].lock("retaken").break_lock().unwrap());
    assert!(others[2].lock("retaken").break_lock().unwrap());
    assert_eq!(
        lost.recv_timeout(Duration::from_secs(10)),
        Ok(LostReason::ForceReleased)
    );
    // The natural pattern: take it again, then let go of the old guard.
    let new = lock.lock().unwrap();
    assert_eq!(new.held_members(), 3);
    drop(old);
    for member in lock.members() {
        assert!(member.is_locked().unwrap(), "{member:?} still held");
    }
    let rival = redlock(&others, "retaken");
    assert!(rival.try_lock().unwrap().is_none());
    assert!(new.check().is_ok());
    new.unlock().unwrap();
    for member in lock.members() {
        assert!(!member.is_locked().unwrap());
    }
}

#[test]
fn a_single_lock_inside_a_fenced_redlock_is_not_taken_for_lost() {
    let servers = masters(3);
    let (manager, reports) = common::reporting_manager(&servers[0], Duration::from_secs(30));
    let mut managers = managers(&urls(&servers[1..]), Duration::from_secs(30));
    managers.insert(0, manager.clone());
    let _ = servers[1].command(&["SET", "redisson_lock_token:{nested}", "50"]);
    let lock = redlock(&managers, "nested");
    let group = lock.lock().unwrap();
    let token = group.fencing_token();
    assert_eq!(token, 51, "raised to the largest member token");
    // The same thread takes the lock of the first master on its own: a reentrant level there.
    let single = manager.lock("nested").lock().unwrap();
    assert!(single.check().is_ok());
    assert!(group.check().is_ok());
    assert_eq!(
        single.fencing_token(),
        1,
        "the token of the chain it joined"
    );
    assert!(reports.try_recv().is_err(), "no false loss");
    single.unlock().unwrap();
    group.unlock().unwrap();
    assert_nothing_left(&manager, &servers[0]);
}

#[test]
fn too_short_a_lease_is_refused() {
    let servers = masters(1);
    let managers = managers(&urls(&servers), Duration::from_secs(30));
    let lock = redlock(&managers, "brief");
    assert!(matches!(
        lock.leased_for(Duration::from_millis(2)).lock(),
        Err(Error::InvalidArgument(_))
    ));
}

/// A group lock is made of plain locks: a fair, read, write or non-reentrant lock as a member
/// is refused at once, rather than taken with the wrong renewal, channel, queue or rule.
#[test]
fn a_group_refuses_members_that_are_not_plain_locks() {
    let servers = masters(2);
    let managers = managers(&urls(&servers), Duration::from_secs(5));
    let members = [
        managers[0].fair_lock("group"),
        managers[0].read_write_lock("group").read().clone(),
        managers[0].read_write_lock("group").write().clone(),
        managers[0].non_reentrant_lock("group"),
        managers[0].non_reentrant_fair_lock("group"),
    ];
    for odd in members {
        let locks = vec![odd.clone(), managers[1].lock("group")];
        assert!(
            matches!(RedLock::new(locks), Err(Error::InvalidArgument(_))),
            "{odd:?}"
        );
        let locks = vec![managers[1].lock("group"), odd];
        assert!(matches!(
            MultiLock::new(locks),
            Err(Error::InvalidArgument(_))
        ));
    }
}
