//! Calls whose answer is lost after Redis ran them (a proxy lets the command through and cuts
//! the connection before the answer), and calls that meet Redis paused: nothing is applied
//! twice, nothing is left behind, and every wait and release rides out the outage.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, server, RedisServer};
use redlease::{CancelToken, Error, LockManager};
use redlease_testing::CuttingProxy;

const PATIENCE: Duration = Duration::from_secs(10);

/// A manager through `proxy` with 1 s timeouts.
fn manager_through(proxy: &CuttingProxy) -> LockManager {
    LockManager::builder(proxy.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .build()
        .expect("build manager")
}

/// A manager of `server` with 1 s timeouts and a 10 s outage grace.
fn manager(server: &RedisServer) -> LockManager {
    LockManager::builder(server.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .outage_grace(Duration::from_secs(10))
        .build()
        .expect("build manager")
}

fn get(redis: &RedisServer, key: &str) -> String {
    redis.command(&["GET", key]).unwrap()
}

#[test]
fn a_count_down_whose_answer_is_lost_counts_once() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = manager_through(&proxy);
    let latch = manager.count_down_latch("cut-latch");
    assert!(latch.try_set_count(9).unwrap());
    latch.count_down().unwrap(); // loads the script: the cut one then runs at once
    proxy.cut_next(&["EVALSHA", "cut-latch"]);
    latch.count_down().unwrap();
    assert_eq!(proxy.cuts(), 1, "the answer was cut");
    assert_eq!(
        latch.count().unwrap(),
        7,
        "9, then two count-downs, each once"
    );
    assert_eq!(get(&redis, "cut-latch"), "$1\r\n7\r\n");
}

#[test]
fn a_semaphore_release_whose_answer_is_lost_adds_its_permits_once() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = manager_through(&proxy);
    let semaphore = manager.semaphore("cut-semaphore");
    assert!(semaphore.try_set_permits(5).unwrap());
    semaphore.acquire(1).unwrap();
    semaphore.release(1).unwrap();
    proxy.cut_next(&["EVALSHA", "cut-semaphore"]);
    semaphore.release(1).unwrap();
    assert_eq!(proxy.cuts(), 1);
    assert_eq!(
        semaphore.available_permits().unwrap(),
        6,
        "5, then one more"
    );
}

/// A semaphore guard's drop does not wait for an answer that does not come: the cleanup
/// thread sends its release again, which is answered; the first copy, held up in the network
/// until then and delivered after, finds the answer kept and gives nothing back twice.
#[test]
fn a_dropped_semaphore_guards_release_held_past_its_resend_gives_the_permits_back_once() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = manager_through(&proxy);
    let slots = manager.semaphore("held-guard");
    assert!(slots.try_set_permits(3).unwrap());
    let taken = slots.acquire_guarded(2).unwrap();
    let held = proxy.hold_next(&["EVALSHA", "held-guard"]);
    drop(taken);
    assert!(
        held.wait_until_held(Duration::ZERO),
        "the drop sent its release"
    );
    assert!(eventually(PATIENCE, || {
        manager.stats().cleanup_pending == 0 && slots.available_permits().unwrap() == 3
    }));
    assert_eq!(
        manager.stats().cleanup_done,
        1,
        "the cleanup thread's resend"
    );
    let reply = String::from_utf8_lossy(&held.deliver().unwrap()).into_owned();
    assert!(reply.starts_with('*'), "the answer kept: {reply:?}");
    assert_eq!(slots.available_permits().unwrap(), 3, "given back once");
}

#[test]
fn a_permit_take_whose_answer_is_lost_takes_one_permit() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = manager_through(&proxy);
    let semaphore = manager.permit_semaphore("cut-permits");
    assert!(semaphore.try_set_permits(5).unwrap());
    drop(semaphore.lock().unwrap());
    proxy.cut_next(&["EVALSHA", "cut-permits"]);
    let permit = semaphore.try_lock_for(PATIENCE).unwrap().expect("taken");
    assert_eq!(proxy.cuts(), 1);
    assert_eq!(
        semaphore.available_permits().unwrap(),
        4,
        "one permit taken"
    );
    permit.unlock().unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 5, "all back");
}

#[test]
fn a_take_whose_every_answer_is_lost_is_undone() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = manager_through(&proxy);
    let semaphore = manager.semaphore("cut-takes");
    assert!(semaphore.try_set_permits(2).unwrap());
    semaphore.acquire(1).unwrap();
    semaphore.release(1).unwrap();
    // The take and its resend on a fresh connection both run, and neither answer comes.
    proxy.cut_next_times(&["EVALSHA", "cut-takes"], 2);
    assert!(
        semaphore.try_acquire_for(1, PATIENCE).unwrap(),
        "taken once answered"
    );
    assert_eq!(proxy.cuts(), 2);
    // Whatever the unanswered takes took was given back: one permit is taken, by us.
    assert!(
        eventually(PATIENCE, || semaphore.available_permits().unwrap() == 1),
        "{} available",
        semaphore.available_permits().unwrap()
    );
    semaphore.release(1).unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 2);
    assert!(eventually(PATIENCE, || manager.stats().cleanup_pending == 0));
    assert_eq!(
        manager.stats().cleanup_done,
        1,
        "the undo of the unanswered take"
    );
}

#[test]
fn a_fair_waiter_that_gives_up_while_redis_is_paused_leaves_the_queue_once_it_is_back() {
    let redis = server();
    let manager = manager(&redis);
    let fair = manager.fair_lock("paused-queue");
    let held = fair.lock().unwrap();
    let stop = CancelToken::new();
    let waiter = {
        let fair = fair.cancellable_by(&stop);
        std::thread::spawn(move || fair.try_lock_for(Duration::from_secs(60)).map(drop))
    };
    assert!(
        eventually(PATIENCE, || redis
            .command(&["LLEN", "redisson_lock_queue:{paused-queue}"])
            .unwrap()
            == ":1\r\n"),
        "the waiter is in line"
    );
    redis.pause().unwrap();
    stop.cancel();
    // Its undo (leaving the line) cannot reach the server: the manager keeps it.
    let outcome = waiter.join().unwrap();
    assert!(matches!(outcome, Err(Error::Cancelled)), "{outcome:?}");
    redis.resume().unwrap();
    // The lock is released by its holder; another thread in line takes it at once.
    let other = manager.fair_lock("paused-queue");
    let contender = std::thread::spawn(move || {
        let started = Instant::now();
        let taken = other.try_lock_for(Duration::from_secs(8)).unwrap();
        (taken.is_some(), started.elapsed())
    });
    held.unlock().unwrap();
    let (taken, waited) = contender.join().unwrap();
    assert!(
        taken,
        "the lock was free, behind nobody, yet not taken in {waited:?}"
    );
    assert!(eventually(PATIENCE, || manager.stats().cleanup_pending == 0));
}

#[test]
fn latch_and_semaphore_waits_ride_out_a_paused_redis() {
    let redis = server();
    let manager = manager(&redis);
    let latch = manager.count_down_latch("paused-latch");
    assert!(latch.try_set_count(1).unwrap());
    let semaphore = manager.semaphore("paused-semaphore");
    assert!(semaphore.try_set_permits(0).unwrap());
    redis.pause().unwrap();
    let latch_waiter = {
        let latch = latch.clone();
        std::thread::spawn(move || latch.wait_for(Duration::from_secs(60)))
    };
    let semaphore_waiter = {
        let semaphore = semaphore.clone();
        std::thread::spawn(move || semaphore.try_acquire_for(1, Duration::from_secs(60)))
    };
    // A waiter counts as waiting once its first try is over: with Redis paused, it failed.
    assert!(
        eventually(PATIENCE, || manager.stats().waiting == 2),
        "both waiters go on after their first try failed"
    );
    redis.resume().unwrap();
    latch.count_down().unwrap();
    semaphore.release(1).unwrap();
    assert!(latch_waiter.join().unwrap().unwrap(), "the latch opened");
    assert!(
        semaphore_waiter.join().unwrap().unwrap(),
        "the permit was taken"
    );
}

#[test]
fn an_unlock_rides_out_a_paused_redis_and_a_dropped_guard_is_released_after() {
    let redis = server();
    let manager = manager(&redis);
    let lock = manager.lock("paused-unlock");
    let guard = lock.lock().unwrap();
    redis.pause().unwrap();
    let resuming = std::thread::spawn(move || {
        // Longer than the two tries the release had before.
        std::thread::sleep(Duration::from_millis(2500));
        redis.resume().unwrap();
        redis
    });
    guard.unlock().unwrap();
    let redis = resuming.join().unwrap();
    assert!(!lock.is_locked().unwrap(), "released once Redis answered");

    // A guard dropped while Redis is paused: its release is sent again in the background,
    // long before the 30 s lease would free the lock.
    let dropping = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            redis.pause().unwrap();
            drop(guard);
            redis
        })
    };
    let redis = dropping.join().unwrap();
    assert_eq!(manager.stats().cleanup_pending, 1, "the release is kept");
    redis.resume().unwrap();
    assert!(
        eventually(PATIENCE, || !lock.is_locked().unwrap()),
        "the dropped guard's release reached the server"
    );
    assert!(eventually(PATIENCE, || manager.stats().cleanup_done == 1));
}

#[test]
fn a_change_that_cannot_be_confirmed_says_so() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = LockManager::builder(proxy.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .outage_grace(Duration::from_millis(500))
        .build()
        .unwrap();
    let latch = manager.count_down_latch("unconfirmed");
    assert!(latch.try_set_count(3).unwrap());
    latch.count_down().unwrap();
    redis.pause().unwrap();
    let outcome = latch.count_down();
    redis.resume().unwrap();
    assert!(
        matches!(&outcome, Err(Error::Indeterminate { name, .. }) if name == "unconfirmed"),
        "{outcome:?}"
    );
    assert!(!outcome.unwrap_err().is_transient());
    // It did run (Redis was only paused), once.
    assert!(eventually(PATIENCE, || latch.count().unwrap() == 1));
}

/// A grant that arrives after its lease ran out by the local clock (a slow network, a frozen
/// master) is never handed out as a guard, lost the moment it is returned: it is given back,
/// and the wait goes on until its deadline.
#[test]
fn a_grant_that_arrives_past_its_lease_is_not_handed_out() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = manager_through(&proxy);
    let lock = manager.lock("late-grant");
    lock.try_lock().unwrap().expect("free").unlock().unwrap(); // the scripts are loaded
    proxy.set_latency(Duration::from_millis(400));
    let lease = Duration::from_millis(200);
    if let Ok(Some(guard)) = lock.leased_for(lease).try_lock_for(Duration::from_secs(2)) {
        panic!("a guard handed out past its lease: {:?}", guard.check());
    }
    proxy.set_latency(Duration::ZERO);
    let guard = lock
        .leased_for(Duration::from_secs(5))
        .try_lock_for(PATIENCE)
        .unwrap()
        .expect("the late grants were given back or ran out");
    assert!(!guard.is_lost());
    guard.unlock().unwrap();
}

/// A wait whose every grant comes after its lease ran out (the lease is shorter than the
/// link's round trip) ends with `LeaseSpent` after three of them in a row, instead of trying
/// forever.
#[test]
fn a_wait_whose_grants_all_come_too_late_ends() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = manager_through(&proxy);
    let lock = manager.lock("always-late");
    let permits = manager.permit_semaphore("always-late-permits");
    assert!(permits.try_set_permits(1).unwrap());
    lock.try_lock().unwrap().expect("free").unlock().unwrap(); // the scripts are loaded
    drop(permits.try_lock().unwrap().expect("free"));
    proxy.set_latency(Duration::from_millis(300));
    let lease = Duration::from_millis(100);
    let started = Instant::now();
    let outcome = lock.leased_for(lease).lock().map(drop);
    assert!(
        matches!(&outcome, Err(Error::LeaseSpent { name, .. }) if name == "always-late"),
        "{outcome:?}"
    );
    let outcome = permits.leased_for(lease).lock().map(drop);
    assert!(
        matches!(&outcome, Err(Error::LeaseSpent { name, .. }) if name == "always-late-permits"),
        "{outcome:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(20), "no hang");
    proxy.set_latency(Duration::ZERO);
    // Every late grant was given back.
    assert!(eventually(PATIENCE, || !lock.is_locked().unwrap()));
    assert!(eventually(PATIENCE, || permits
        .available_permits()
        .unwrap()
        == 1));
}

/// The same for a permit: a permit granted after its lease ran out by the local clock is
/// given back, not handed out lost.
#[test]
fn a_permit_granted_past_its_lease_is_not_handed_out() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = manager_through(&proxy);
    let permits = manager.permit_semaphore("late-permit");
    assert!(permits.try_set_permits(1).unwrap());
    permits.try_lock().unwrap().expect("free").unlock().unwrap(); // scripts loaded
    proxy.set_latency(Duration::from_millis(400));
    let lease = Duration::from_millis(200);
    if let Ok(Some(guard)) = permits
        .leased_for(lease)
        .try_lock_for(Duration::from_secs(2))
    {
        panic!("a permit handed out past its lease: {:?}", guard.check());
    }
    proxy.set_latency(Duration::ZERO);
    let guard = permits
        .leased_for(Duration::from_secs(5))
        .try_lock_for(PATIENCE)
        .unwrap()
        .expect("the late permits were given back or ran out");
    assert!(!guard.is_lost());
    guard.unlock().unwrap();
}

// Late copies: a call whose first send the network holds up past its response timeout, past
// the resend that was answered, and past the time the answer of that resend is kept, then
// delivers. Every kind of change that carries a request id must refuse such a copy (or find
// the answer kept), never apply it again.

/// A manager through `proxy` that gives up on an answer after 0.5 s and rides out an outage
/// for 1 s, so that its requests' deadlines come soon, with a watchdog that deletes the keys
/// of answered requests within a second.
fn impatient_manager_through(proxy: &CuttingProxy) -> LockManager {
    LockManager::builder(proxy.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(500))
        .outage_grace(Duration::from_secs(1))
        .watchdog_timeout(Duration::from_secs(3))
        .build()
        .expect("build manager")
}

/// How many keys keep answers of requests (or mark them undone) now.
fn request_keys(redis: &RedisServer) -> usize {
    let reply = redis.command(&["KEYS", "redlease_request:*"]).unwrap();
    reply
        .lines()
        .next()
        .and_then(|header| header.strip_prefix('*'))
        .and_then(|count| count.parse().ok())
        .unwrap_or(usize::MAX)
}

/// Runs `change` while the proxy holds back the first request that contains `words`: the
/// client gives up on it, sends it again on another connection, and that copy is answered.
/// Waits until no key keeps any request's answer (deleted once answered, or expired after the
/// request's deadline), then delivers the held copy and answers what Redis answered it.
fn late_copy_of(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    words: &[&str],
    change: impl FnOnce() -> Result<(), String>,
) -> Result<String, String> {
    let held = proxy.hold_next(words);
    change()?;
    if !held.wait_until_held(Duration::ZERO) {
        return Err("no request was held back".into());
    }
    if !eventually(Duration::from_secs(30), || request_keys(redis) == 0) {
        return Err("request keys are still there after 30 s".into());
    }
    let reply = held.deliver().map_err(|err| err.to_string())?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Fails unless Redis refused the late copy for coming after its deadline.
fn refused_as_late(reply: &str) -> Result<(), String> {
    match reply.starts_with("-REDLEASE_LATE") {
        true => Ok(()),
        false => Err(format!("the late copy was answered {reply:?}")),
    }
}

fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, wanted: T) -> Result<(), String> {
    match got == wanted {
        true => Ok(()),
        false => Err(format!("{what}: {got:?}, wanted {wanted:?}")),
    }
}

fn ok<T, E: std::fmt::Debug>(outcome: Result<T, E>) -> Result<T, String> {
    outcome.map_err(|err| format!("{err:?}"))
}

/// One kind of change and what happens to it on the way (held back and delivered late, or
/// its answer lost), run against its own server behind its own proxy.
type Case = fn(&RedisServer, &CuttingProxy, &LockManager) -> Result<(), String>;

/// Runs every case at once, each with a server, a proxy and a manager (`manager` makes it)
/// of its own, and fails with every case that failed.
fn run_cases(cases: &[(&str, Case)], manager: fn(&CuttingProxy) -> LockManager) {
    let failures: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = cases
            .iter()
            .map(|&(name, case)| {
                scope.spawn(move || {
                    let redis = server();
                    let proxy = CuttingProxy::start(redis.port()).unwrap();
                    let manager = manager(&proxy);
                    case(&redis, &proxy, &manager).map_err(|why| format!("{name}: {why}"))
                })
            })
            .collect();
        runs.into_iter()
            .filter_map(|run| run.join().unwrap().err())
            .collect()
    });
    assert!(failures.is_empty(), "{failures:#?}");
}

fn late_count_down(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let latch = manager.count_down_latch("late-latch");
    ok(latch.try_set_count(3))?;
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "late-latch"], || {
        ok(latch.count_down())
    })?;
    refused_as_late(&reply)?;
    expect("count", ok(latch.count())?, 2)
}

fn late_latch_set_count(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let latch = manager.count_down_latch("late-set");
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "late-set"], || {
        expect("set", ok(latch.try_set_count(1))?, true)?;
        ok(latch.count_down())
    })?;
    refused_as_late(&reply)?;
    expect("count of the opened latch", ok(latch.count())?, 0)
}

fn late_latch_delete(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let latch = manager.count_down_latch("late-delete");
    ok(latch.try_set_count(2))?;
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "late-delete"], || {
        expect("deleted", ok(latch.delete())?, true)?;
        expect("set again", ok(latch.try_set_count(4))?, true)
    })?;
    refused_as_late(&reply)?;
    expect("count of the new latch", ok(latch.count())?, 4)
}

fn late_semaphore_release(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let semaphore = manager.semaphore("late-release");
    ok(semaphore.try_set_permits(2))?;
    ok(semaphore.acquire(1))?;
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "late-release"], || {
        ok(semaphore.release(1))
    })?;
    refused_as_late(&reply)?;
    expect("available", ok(semaphore.available_permits())?, 2)
}

fn late_semaphore_set(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let semaphore = manager.semaphore("late-permits-set");
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "late-permits-set"], || {
        expect("set", ok(semaphore.try_set_permits(2))?, true)?;
        ok(redis.command(&["DEL", "late-permits-set"])).map(drop)
    })?;
    refused_as_late(&reply)?;
    expect("available", ok(semaphore.available_permits())?, 0)
}

fn late_semaphore_drain(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let semaphore = manager.semaphore("late-drain");
    ok(semaphore.try_set_permits(2))?;
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "late-drain"], || {
        expect("drained", ok(semaphore.drain_permits())?, 2)?;
        ok(semaphore.release(3))
    })?;
    refused_as_late(&reply)?;
    expect("available", ok(semaphore.available_permits())?, 3)
}

fn late_semaphore_take(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let semaphore = manager.semaphore("late-take");
    ok(semaphore.try_set_permits(2))?;
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "late-take"], || {
        expect("taken", ok(semaphore.try_acquire_for(1, PATIENCE))?, true)
    })?;
    refused_as_late(&reply)?;
    expect("available", ok(semaphore.available_permits())?, 1)
}

fn late_permit_take(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let permits = manager.permit_semaphore("late-permit");
    ok(permits.try_set_permits(2))?;
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "late-permit"], || {
        ok(permits.try_lock_for(PATIENCE))?
            .ok_or("not taken")?
            .unlock()
            .map_err(|e| format!("{e:?}"))
    })?;
    refused_as_late(&reply)?;
    expect("available", ok(permits.available_permits())?, 2)
}

fn late_permit_change(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let permits = manager.permit_semaphore("late-permit-add");
    ok(permits.try_set_permits(2))?;
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "late-permit-add"], || {
        ok(permits.add_permits(-1)).map(drop)
    })?;
    refused_as_late(&reply)?;
    expect("available", ok(permits.available_permits())?, 1)
}

fn late_break_lock(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let lock = manager.lock("late-force");
    let first = ok(lock.try_lock())?.ok_or("free")?;
    let taker = manager.lock("late-force");
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "late-force"], || {
        expect("freed", ok(lock.break_lock())?, true)?;
        drop(first);
        // Another thread takes the lock: the late copy must not free it.
        std::thread::spawn(move || std::mem::forget(taker.try_lock()))
            .join()
            .map_err(|_| "the taker panicked".to_string())
    })?;
    refused_as_late(&reply)?;
    expect("held by the other thread", ok(lock.is_locked())?, true)
}

fn late_fenced_write(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let store = manager.fenced_store("late-fenced");
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "late-fenced"], || {
        ok(store.set(5, "first"))?;
        // The same holder writes again with its token: the late first write must not undo it.
        ok(store.set(5, "second"))
    })?;
    refused_as_late(&reply)?;
    expect(
        "value",
        ok(store.get::<String>())?,
        Some("second".to_owned()),
    )
}

fn late_guarded_write(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let guard = ok(manager.lock("late-guard").lock())?;
    let mut writes = redlease::Writes::new();
    writes.increment_by("{late-guard}:counter", 1);
    let reply = late_copy_of(redis, proxy, &["EVALSHA", "{late-guard}:counter"], || {
        ok(guard.guarded_write(&writes)).map(drop)
    })?;
    refused_as_late(&reply)?;
    expect(
        "counter",
        get(redis, "{late-guard}:counter"),
        "$1\r\n1\r\n".to_owned(),
    )
}

fn late_guarded_script(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let guard = ok(manager.lock("late-script").lock())?;
    let script = redlease::GuardedScript::new("return redis.call('incr', KEYS[1])");
    let key = "{late-script}:runs";
    let reply = late_copy_of(redis, proxy, &["EVALSHA", key], || {
        ok(guard.run_guarded(&script, &[key], &[] as &[&str])).map(drop)
    })?;
    refused_as_late(&reply)?;
    expect("runs", get(redis, key), "$1\r\n1\r\n".to_owned())
}

/// Every change that carries a request id, held back past its resend, its answer and the
/// time its answer is kept, then delivered: refused, never applied a second time. (Before
/// the deadline, the copy finds the answer kept: see the test after this one.)
#[test]
fn a_late_copy_of_a_change_is_refused_after_its_deadline() {
    let cases: [(&str, Case); 13] = [
        ("count_down", late_count_down),
        ("latch try_set_count", late_latch_set_count),
        ("latch delete", late_latch_delete),
        ("semaphore release", late_semaphore_release),
        ("semaphore try_set_permits", late_semaphore_set),
        ("semaphore drain_permits", late_semaphore_drain),
        ("semaphore take", late_semaphore_take),
        ("permit take", late_permit_take),
        ("permit semaphore add_permits", late_permit_change),
        ("break_lock", late_break_lock),
        ("fenced store set", late_fenced_write),
        ("guarded_write", late_guarded_write),
        ("run_guarded", late_guarded_script),
    ];
    run_cases(&cases, impatient_manager_through);
}

/// A late copy that comes while the answer of its resend is still kept finds it, and
/// changes nothing: a count-down whose first send is delivered just after its resend was
/// answered.
#[test]
fn a_late_copy_before_its_deadline_finds_the_answer_kept() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = impatient_manager_through(&proxy);
    let latch = manager.count_down_latch("early-late");
    assert!(latch.try_set_count(3).unwrap());
    let held = proxy.hold_next(&["EVALSHA", "early-late"]);
    latch.count_down().unwrap();
    assert!(held.wait_until_held(Duration::ZERO));
    // The count's own request was sent once: its key goes once answered. The count-down's
    // stays, for the copy still on its way.
    assert!(
        eventually(PATIENCE, || request_keys(&redis) == 1),
        "the resent request's answer is kept"
    );
    let reply = String::from_utf8_lossy(&held.deliver().unwrap()).into_owned();
    assert_eq!(reply, ":2\r\n", "the answer kept");
    assert_eq!(latch.count().unwrap(), 2, "counted once");
}

// Late tries: an acquisition try held up past its response timeout, while its undo runs
// elsewhere and the wait takes the lock with a new try; then the network delivers the late
// try and drops the connection before the undo queued behind it.

/// A manager through `proxy` like [`impatient_manager_through`], whose leases last 30 s: a
/// lock taken by a late try and left would stay taken that long.
fn long_lease_manager_through(proxy: &CuttingProxy) -> LockManager {
    LockManager::builder(proxy.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(500))
        .outage_grace(Duration::from_secs(1))
        .build()
        .expect("build manager")
}

/// Holds back the first try of `take` on the lock named `name`, lets `take` take and give
/// back the lock with later tries, then delivers the held try alone (cutting the connection
/// before the undo behind it) and answers what Redis answered it.
fn late_try_of(
    proxy: &CuttingProxy,
    name: &str,
    take: impl FnOnce() -> Result<(), String>,
) -> Result<String, String> {
    let held = proxy.hold_next(&["EVALSHA", name]);
    take()?;
    if !held.wait_until_held(Duration::ZERO) {
        return Err("no try was held back".into());
    }
    let reply = held
        .deliver_first_then_cut()
        .map_err(|err| err.to_string())?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// A late try that reaches the server before its deadline may take the lock; the undo of it
/// is sent again until it runs after that deadline, so the lock is free again at once, not
/// after the 30 s lease. For each kind of lock.
#[test]
fn a_late_try_before_its_deadline_is_undone_after_it() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = long_lease_manager_through(&proxy);
    let rw = manager.read_write_lock("late-try-rw");
    let kinds: [(&str, redlease::Lock); 4] = [
        ("late-try-plain", manager.lock("late-try-plain")),
        ("late-try-fair", manager.fair_lock("late-try-fair")),
        ("late-try-rw", rw.write().clone()),
        ("late-try-rw", rw.read().clone()),
    ];
    for (name, lock) in kinds {
        // The scripts are loaded: the held try is one call.
        lock.try_lock().unwrap().expect("free").unlock().unwrap();
        let reply = late_try_of(&proxy, name, || {
            let guard = lock
                .try_lock_for(PATIENCE)
                .map_err(|err| format!("{err:?}"))?;
            guard
                .ok_or("not taken")?
                .unlock()
                .map_err(|err| format!("{err:?}"))
        })
        .unwrap();
        assert!(reply.starts_with("*2\r\n"), "{name}: {reply:?}");
        assert!(
            eventually(Duration::from_secs(5), || !lock.is_locked().unwrap()),
            "{name}: the late try's hold was left (it answered {reply:?})"
        );
        assert!(
            eventually(PATIENCE, || manager.stats().cleanup_pending == 0),
            "{name}: the undo is still pending"
        );
    }
    let queue = redis
        .command(&["EXISTS", "redisson_lock_queue:{late-try-fair}"])
        .unwrap();
    assert_eq!(queue, ":0\r\n", "a place in line was left");
}

/// A late try that reaches the server after its deadline is refused, and takes nothing.
#[test]
fn a_late_try_after_its_deadline_is_refused() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = long_lease_manager_through(&proxy);
    let lock = manager.lock("late-try-refused");
    lock.try_lock().unwrap().expect("free").unlock().unwrap();
    let held = proxy.hold_next(&["EVALSHA", "late-try-refused"]);
    let guard = lock.try_lock_for(PATIENCE).unwrap().expect("taken");
    guard.unlock().unwrap();
    assert!(held.wait_until_held(Duration::ZERO));
    // The undo is sent again until the try's deadline has passed: once it is done, no copy
    // of the try can take anything.
    assert!(eventually(PATIENCE, || manager.stats().cleanup_pending == 0));
    let reply = String::from_utf8_lossy(&held.deliver_first_then_cut().unwrap()).into_owned();
    assert!(reply.starts_with("*2\r\n:5\r\n"), "{reply:?}");
    assert!(!lock.is_locked().unwrap());
}

/// A late copy of a release of one reentrant level, delivered after the thread has taken the
/// level again, is refused: it must not take away the level taken since.
#[test]
fn a_late_copy_of_a_release_is_refused_after_its_deadline() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = LockManager::builder(proxy.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(500))
        .outage_grace(Duration::from_secs(1))
        .watchdog_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let lock = manager.lock("late-release");
    let _outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    // The release is the only call that names a release receipt.
    let held = proxy.hold_next(&["EVALSHA", "redisson_unlock_latch"]);
    inner.unlock().unwrap();
    assert!(held.wait_until_held(Duration::ZERO));
    let _again = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert!(
        eventually(Duration::from_secs(30), || common::receipts_left(&redis)
            == 0),
        "receipts are still there after 30 s"
    );
    let reply = String::from_utf8_lossy(&held.deliver().unwrap()).into_owned();
    assert!(reply.starts_with("-REDLEASE_LATE"), "{reply:?}");
    assert_eq!(
        lock.hold_count().unwrap(),
        2,
        "a level taken since was taken away"
    );
}

/// A late copy of a revocation request, delivered after the holder it was meant for let go
/// and another took the lock, is refused: the new holder is not asked.
#[test]
fn a_late_revocation_request_does_not_reach_a_later_holder() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = long_lease_manager_through(&proxy);
    let lock = manager.lock("late-revoke");
    let first = lock.lock().unwrap();
    assert_eq!(lock.request_revocation().unwrap(), 1, "scripts loaded");
    assert!(eventually(PATIENCE, || first.is_revocation_requested()));
    let held = proxy.hold_next(&["EVALSHA", "late-revoke", "revoke"]);
    assert!(lock.request_revocation().is_err(), "its answer never came");
    first.unlock().unwrap();
    let second = lock.lock().unwrap();
    assert!(held.wait_until_held(Duration::ZERO));
    // One send, and its deadline (one send from it, and a second) has passed.
    std::thread::sleep(Duration::from_secs(3));
    let reply = String::from_utf8_lossy(&held.deliver().unwrap()).into_owned();
    assert!(reply.starts_with("-REDLEASE_LATE"), "{reply:?}");
    // A request of its own, after it, reaches the second holder: the notices flow.
    assert_eq!(lock.request_revocation().unwrap(), 1);
    assert!(eventually(PATIENCE, || second.is_revocation_requested()));
}

// Lost answers, for every kind of call that changes state: the proxy lets the call run and
// cuts its connection before the answer; the call is sent again and answered, and what it
// changed, it changed once.

/// Runs `change` with the answer of the next call that contains `words` cut (once), and
/// fails unless a cut happened.
fn with_cut_answer(
    proxy: &CuttingProxy,
    words: &[&str],
    change: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    let before = proxy.cuts();
    proxy.cut_next(words);
    change()?;
    expect("answers cut", proxy.cuts(), before + 1)
}

fn cut_latch_set_and_delete(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let latch = manager.count_down_latch("cut-latch-set");
    ok(latch.try_set_count(1))?;
    ok(latch.delete())?; // the scripts are loaded
    with_cut_answer(proxy, &["EVALSHA", "cut-latch-set"], || {
        expect("set", ok(latch.try_set_count(3))?, true)
    })?;
    expect("count", ok(latch.count())?, 3)?;
    with_cut_answer(proxy, &["EVALSHA", "cut-latch-set"], || {
        expect("deleted", ok(latch.delete())?, true)
    })?;
    expect("key", get(redis, "cut-latch-set"), "$-1\r\n".to_owned())
}

fn cut_semaphore_changes(
    _: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let semaphore = manager.semaphore("cut-changes");
    ok(semaphore.try_set_permits(1))?;
    ok(semaphore.add_permits(1))?; // the scripts are loaded
    ok(semaphore.drain_permits())?;
    with_cut_answer(proxy, &["EVALSHA", "cut-changes"], || {
        expect("added", ok(semaphore.add_permits(3))?, 3)
    })?;
    with_cut_answer(proxy, &["EVALSHA", "cut-changes"], || {
        expect("taken away", ok(semaphore.add_permits(-2))?, 1)
    })?;
    expect("available", ok(semaphore.available_permits())?, 1)?;
    with_cut_answer(proxy, &["EVALSHA", "cut-changes"], || {
        expect("drained", ok(semaphore.drain_permits())?, 1)
    })?;
    expect("available", ok(semaphore.available_permits())?, 0)
}

fn cut_permit_release(
    _: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let permits = manager.permit_semaphore("cut-permit-release");
    ok(permits.try_set_permits(2))?;
    ok(ok(permits.lock())?.unlock())?; // the scripts are loaded
    let first = ok(permits.lock())?;
    let _second = ok(permits.lock())?;
    with_cut_answer(proxy, &["EVALSHA", "cut-permit-release"], || {
        ok(first.unlock())
    })?;
    expect("available", ok(permits.available_permits())?, 1)
}

fn cut_break_lock(
    _: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let lock = manager.lock("cut-force");
    ok(lock.break_lock())?; // the script is loaded
    let guard = ok(lock.lock())?;
    with_cut_answer(proxy, &["EVALSHA", "cut-force"], || {
        expect("freed", ok(lock.break_lock())?, true)
    })?;
    expect(
        "its holder told",
        eventually(PATIENCE, || guard.is_lost()),
        true,
    )?;
    expect("locked", ok(lock.is_locked())?, false)
}

fn cut_fenced_writes(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let store = manager.fenced_store("cut-fenced");
    ok(store.set(1, "first"))?; // the script is loaded
    with_cut_answer(proxy, &["EVALSHA", "cut-fenced"], || {
        ok(store.set(2, "second"))
    })?;
    expect(
        "value",
        ok(store.get::<String>())?,
        Some("second".to_owned()),
    )?;
    with_cut_answer(proxy, &["EVALSHA", "cut-fenced"], || ok(store.delete(3)))?;
    expect("value", get(redis, "cut-fenced"), "$-1\r\n".to_owned())?;
    expect("highest", ok(store.highest_token())?, 3)
}

fn cut_guarded_script(
    redis: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let guard = ok(manager.lock("cut-script").lock())?;
    let script = redlease::GuardedScript::new("return redis.call('incr', KEYS[1])");
    let key = "{cut-script}:runs";
    ok(guard.run_guarded(&script, &[key], &[] as &[&str]))?; // the script is loaded
    with_cut_answer(proxy, &["EVALSHA", key], || {
        ok(guard.run_guarded(&script, &[key], &[] as &[&str])).map(drop)
    })?;
    expect("runs", get(redis, key), "$1\r\n2\r\n".to_owned())
}

fn cut_lock_kinds(
    _: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let rw = manager.read_write_lock("cut-kinds-rw");
    let kinds: [(&str, redlease::Lock); 4] = [
        ("cut-kinds-plain", manager.lock("cut-kinds-plain")),
        ("cut-kinds-fair", manager.fair_lock("cut-kinds-fair")),
        ("cut-kinds-rw", rw.write().clone()),
        ("cut-kinds-rw", rw.read().clone()),
    ];
    for (name, lock) in kinds {
        ok(ok(lock.lock())?.unlock())?; // the scripts are loaded
        let mut guards = Vec::new();
        // A take, and a reentrant level, whose answers are lost: a level each.
        for _ in 0..2 {
            with_cut_answer(proxy, &["EVALSHA", name], || {
                guards.push(ok(lock.lock())?);
                Ok(())
            })?;
        }
        expect(&format!("{name}: levels"), ok(lock.hold_count())?, 2)?;
        // Releases whose answers are lost: a level each.
        let inner = guards.pop().ok_or("no guard")?;
        with_cut_answer(proxy, &["EVALSHA", name], || ok(inner.unlock()))?;
        expect(&format!("{name}: levels"), ok(lock.hold_count())?, 1)?;
        let outer = guards.pop().ok_or("no guard")?;
        with_cut_answer(proxy, &["EVALSHA", name], || ok(outer.unlock()))?;
        expect(&format!("{name}: held"), ok(lock.is_locked())?, false)?;
    }
    Ok(())
}

fn cut_upgrade(_: &RedisServer, proxy: &CuttingProxy, manager: &LockManager) -> Result<(), String> {
    let rw = manager.read_write_lock("cut-upgrade");
    let reading = ok(rw.upgradable().lock())?;
    ok(ok(reading.upgrade())?.unlock())?; // the scripts are loaded
    with_cut_answer(proxy, &["EVALSHA", "cut-upgrade"], || {
        let writing = ok(reading.upgrade())?;
        expect("writes", writing.holder_id(), reading.holder_id())?;
        ok(writing.unlock())
    })?;
    expect("still upgradable", ok(rw.upgradable().is_locked())?, true)?;
    ok(reading.unlock())?;
    expect("free", ok(rw.write().is_locked())?, false)
}

fn cut_election(
    _: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let election = manager.leader_election("cut-election");
    let mut observer = ok(election.observe())?;
    ok(ok(election.candidate("warm").lock())?.unlock())?; // the scripts are loaded
    let candidate = election.candidate("host-a");
    // Its campaign (the lock's take), its announcement and its resignation each lose an
    // answer.
    let mut leading = None;
    with_cut_answer(
        proxy,
        &["EVALSHA", "redisson_lock_token:{cut-election}"],
        || {
            leading = Some(ok(candidate.lock())?);
            Ok(())
        },
    )?;
    ok(ok(candidate.lock())?.unlock()).map_err(|why| format!("a level: {why}"))?;
    ok(leading.take().ok_or("not leading")?.unlock())?;
    with_cut_answer(
        proxy,
        &["EVALSHA", "redlease_leader_log:{cut-election}"],
        || {
            leading = Some(ok(candidate.lock())?);
            Ok(())
        },
    )?;
    with_cut_answer(
        proxy,
        &["EVALSHA", "redisson_unlock_latch:{cut-election}"],
        || ok(leading.take().ok_or("not leading")?.unlock()),
    )?;
    let mut changes = Vec::new();
    while let Some(change) = ok(observer.next_change_for(Duration::from_millis(500)))? {
        changes.push(change);
    }
    // The warm-up's election and resignation, then host-a's two: each logged once.
    expect("changes", changes.len(), 6)?;
    expect("leader", ok(election.leader())?, None)
}

fn cut_revocation(
    _: &RedisServer,
    proxy: &CuttingProxy,
    manager: &LockManager,
) -> Result<(), String> {
    let lock = manager.lock("cut-revoke");
    let guard = ok(lock.lock())?;
    ok(lock.request_revocation())?; // the script is loaded
    with_cut_answer(proxy, &["EVALSHA", "cut-revoke", "revoke"], || {
        expect(
            "asked",
            ok(lock.request_revocation()).map(|asked| asked >= 1)?,
            true,
        )
    })
    .or_else(|why| match why.contains("Unreachable") {
        // Not sent again by itself: a lost answer is the caller's error, and asking again
        // is harmless (a holder asked twice is told once).
        true => Ok(()),
        false => Err(why),
    })?;
    expect(
        "told",
        eventually(PATIENCE, || guard.is_revocation_requested()),
        true,
    )
}

/// Every kind of call that changes state, its answer lost once after it ran: sent again
/// and answered, it changed what it changes once.
#[test]
fn every_change_whose_answer_is_lost_is_applied_once() {
    let cases: [(&str, Case); 10] = [
        ("latch try_set_count and delete", cut_latch_set_and_delete),
        ("semaphore add, take away, drain", cut_semaphore_changes),
        ("permit release", cut_permit_release),
        ("break_lock", cut_break_lock),
        ("fenced set and delete", cut_fenced_writes),
        ("run_guarded", cut_guarded_script),
        ("lock kinds: take, level, releases", cut_lock_kinds),
        ("upgrade", cut_upgrade),
        ("election: campaign and resignation", cut_election),
        ("revocation request", cut_revocation),
    ];
    run_cases(&cases, manager_through);
}
