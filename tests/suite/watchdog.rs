//! The watchdog: it keeps held locks alive, stops with the last release, batches renewals,
//! and never renews past a release.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, manager, server};

#[test]
fn a_one_second_watchdog_keeps_a_lock_for_ten_seconds() {
    let redis = server();
    let holder = manager(&redis, Duration::from_secs(1));
    let rival = manager(&redis, Duration::from_secs(1));
    let lock = holder.lock("long-job");
    let guard = lock.lock().unwrap();
    let rival_lock = rival.lock("long-job");
    let until = Instant::now() + Duration::from_secs(10);
    let mut tries = 0;
    while Instant::now() < until {
        let got = rival_lock.try_lock_for(Duration::from_millis(500)).unwrap();
        assert!(got.is_none(), "the rival got the lock after {tries} tries");
        tries += 1;
    }
    assert!(!guard.is_lost());
    assert!(lock.remaining_ttl().unwrap().is_some());
    guard.unlock().unwrap();
    assert_eq!(holder.watched_locks(), 0);
    assert!(rival_lock.try_lock().unwrap().is_some());
}

#[test]
fn renewal_stops_with_the_last_level() {
    let redis = server();
    let manager = manager(&redis, Duration::from_millis(600));
    let lock = manager.lock("levels");
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    assert_eq!(manager.watched_locks(), 1);
    drop(inner);
    assert_eq!(
        manager.watched_locks(),
        1,
        "the outer level still asks for renewal"
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(lock.is_locked().unwrap(), "renewed past its 600 ms lease");
    drop(outer);
    assert_eq!(manager.watched_locks(), 0);
    // Leak a level so the key would stay if anything renewed it; nothing does.
    std::mem::forget(lock.leased_for(Duration::from_millis(300)).lock().unwrap());
    assert!(eventually(Duration::from_secs(5), || !lock
        .is_locked()
        .unwrap()));
}

#[test]
fn no_renewal_outlives_its_release() {
    // Release and re-take with a short fixed lease, over and over, while renewals of the
    // earlier watchdog holds are due all the time. A renewal that landed after its release
    // would stretch the fixed lease to the watchdog timeout.
    let redis = server();
    let watchdog = Duration::from_millis(90); // renewals every 30 ms
    let manager = manager(&redis, watchdog);
    let lock = manager.lock("interleave");
    let fixed = Duration::from_millis(40);
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let watched = lock.lock().unwrap();
        std::thread::sleep(Duration::from_millis(rounds % 35));
        drop(watched);
        let short = lock.leased_for(fixed).lock().unwrap();
        let ttl = lock.remaining_ttl().unwrap().unwrap();
        assert!(
            ttl <= fixed,
            "round {rounds}: a renewal stretched the lease to {ttl:?}"
        );
        drop(short);
        rounds += 1;
    }
    assert_eq!(manager.watched_locks(), 0);
}

#[test]
fn thousands_of_locks_are_renewed_in_batches() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(2));
    let locks: Vec<_> = (0..20_000)
        .map(|i| manager.lock(&format!("bulk:{i}")))
        .collect();
    let guards: Vec<_> = locks.iter().map(|lock| lock.lock().unwrap()).collect();
    assert_eq!(manager.watched_locks(), 20_000);
    let stats_before = redis.command(&["INFO", "commandstats"]).unwrap();
    // Three watchdog timeouts: without renewal every lock would be gone.
    std::thread::sleep(Duration::from_secs(6));
    let stats_after = redis.command(&["INFO", "commandstats"]).unwrap();
    assert!(guards.iter().all(|guard| !guard.is_lost()));
    let alive: usize = redis
        .command(&["EVAL", "local n = 0 for i = 0, 19999 do n = n + redis.call('exists', 'bulk:' .. i) end return n", "0"])
        .unwrap()
        .trim_start_matches(':')
        .trim()
        .parse()
        .unwrap();
    assert_eq!(alive, 20_000);
    let evalsha_calls = |stats: &str| -> u64 {
        stats
            .lines()
            .find(|line| line.starts_with("cmdstat_evalsha:"))
            .and_then(|line| line.split("calls=").nth(1))
            .and_then(|rest| rest.split(',').next())
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(0)
    };
    // Renewal every 667 ms: about 9 rounds of 20 000 renewals in 6 s. One script call per lock
    // would be 180 000 calls; batching by tick must average well over 100 locks per call.
    let renewal_calls = evalsha_calls(&stats_after) - evalsha_calls(&stats_before);
    assert!(renewal_calls >= 20, "renewals happened: {renewal_calls}");
    assert!(
        renewal_calls < 1_800,
        "batched, not one call per lock: {renewal_calls}"
    );
    drop(guards);
    assert_eq!(manager.watched_locks(), 0);
}

#[test]
fn release_latches_are_deleted_within_one_renewal_interval() {
    // A latch only serves a retried release; once the answer has arrived it is deleted,
    // instead of living out its TTL (over 10 s here).
    let redis = server();
    let watchdog = Duration::from_millis(1500);
    let interval = watchdog / 3;
    let manager = manager(&redis, watchdog);
    // Renewals of a held lock are due meanwhile: latches ride in their pipelines.
    let held = manager.lock("held");
    let held_guard = held.lock().unwrap();
    for i in 0..10_000 {
        let lock = manager.lock(&format!("latched:{}", i % 100));
        lock.lock().unwrap().unlock().unwrap();
    }
    let latches_left = || common::receipts_left(&redis);
    let within = interval + Duration::from_secs(2);
    assert!(
        eventually(within, || latches_left() == 0),
        "{} release latches left after {within:?}",
        latches_left()
    );
    assert!(!held_guard.is_lost());
    assert!(held.remaining_ttl().unwrap().is_some());
}

#[test]
fn release_receipts_queued_before_a_shutdown_are_deleted_by_it() {
    let redis = server();
    // Receipts wait up to a renewal interval (10 s) for their deletion.
    let manager = manager(&redis, Duration::from_secs(30));
    for index in 0..5 {
        let lock = manager.lock(&format!("shut:{index}"));
        lock.lock().unwrap().unlock().unwrap();
    }
    assert_eq!(common::receipts_left(&redis), 5, "queued, not deleted yet");
    manager.shutdown();
    assert_eq!(common::receipts_left(&redis), 0, "left to their TTL");
}

/// How many locks the starved process holds: enough that renewing them takes the watchdog
/// thread longer than its response timeout when it gets a sliver of a core.
const STARVED_LOCKS: usize = 8_000;

/// How many threads of the starved process spin on its one core beside its own.
const SPINNERS: usize = 40;

/// A process starved of CPU for less than a lease (its threads, pinned to one core, share it
/// with spinning ones, so that the watchdog thread gets a sixteenth of a core) loses none of
/// its locks: the renewals Redis answered are read as renewals, and none is counted failed,
/// however late the process gets to read them.
#[test]
fn a_process_starved_of_cpu_for_less_than_a_lease_loses_no_lock() {
    let redis = server();
    let mut child = common::spawn_child(
        "watchdog::starved_holder_process",
        "starved",
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    let mut stdout = common::wait_for_line(&mut child, "HELD");
    let report = common::line_with(&mut stdout, "LOST");
    assert_eq!(
        report, "0 0 0",
        "locks lost, losses counted, renewals counted failed"
    );
    child.wait_within(common::CHILD_DEADLINE);
}

/// Child side of the test above: pins itself to one core, holds the locks, starves itself
/// for 5 s of its 6 s lease, then waits for two renewal batches more and says how many of
/// its locks it lost, how many losses and failed renewals it counted.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn starved_holder_process() {
    if common::child_role().as_deref() != Some("starved") {
        return;
    }
    pin_to_one_core();
    let manager = redlease::LockManager::builder(common::env("REDLEASE_TEST_URL"))
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(500))
        .watchdog_timeout(Duration::from_secs(6))
        .build()
        .unwrap();
    let guards: Vec<_> = (0..STARVED_LOCKS)
        .map(|index| manager.lock(&format!("starved-{index}")).lock().unwrap())
        .collect();
    println!("HELD");
    let spin_until = Instant::now() + Duration::from_secs(5);
    let spinners: Vec<_> = (0..SPINNERS)
        .map(|_| {
            std::thread::spawn(move || {
                while Instant::now() < spin_until {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    for spinner in spinners {
        spinner.join().unwrap();
    }
    let batches = manager.stats().renewal_batches;
    assert!(eventually(Duration::from_secs(10), || manager
        .stats()
        .renewal_batches
        >= batches + 2));
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    let stats = manager.stats();
    let counted = stats.lost_lease_expired + stats.lost_not_held_anymore;
    println!("LOST {lost} {counted} {}", stats.renewals_failed);
}

/// Pins this process's thread, and the threads it starts from now on, to the first core it
/// may run on.
fn pin_to_one_core() {
    // SAFETY: sched_getaffinity and sched_setaffinity on this thread (pid 0) with a set of
    // the size they are given.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        assert_eq!(libc::sched_getaffinity(0, size, &mut allowed), 0);
        let first = (0..libc::CPU_SETSIZE as usize)
            .find(|&cpu| libc::CPU_ISSET(cpu, &allowed))
            .expect("a core to run on");
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(first, &mut one);
        assert_eq!(libc::sched_setaffinity(0, size, &one), 0);
    }
}
