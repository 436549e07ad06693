//! The forms of waiting users reach for: cancellable waits, deadlines, the scoped
//! `with_lock`, which releases on every way out, and the polling waits of a manager built
//! without pub/sub.

use crate::common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use common::{assert_nothing_left, connection, eventually, manager, server, RedisServer};
use redis::Commands;
use redlease::{CancelToken, Error, RedLock};

/// How long a cancelled wait may take to return (generous: the machine is shared).
const PROMPTLY: Duration = Duration::from_secs(1);

fn subscribers(server: &RedisServer, channel: &str) -> usize {
    let (_, count): (String, usize) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut connection(server))
        .unwrap();
    count
}

#[test]
fn a_cancelled_lock_returns_promptly_and_leaves_no_subscription() {
    let redis = server();
    let holder = manager(&redis, Duration::from_secs(30));
    let waiting = manager(&redis, Duration::from_secs(30));
    let held = holder.lock("job").lock().unwrap();
    let token = CancelToken::new();
    let lock = waiting.lock("job").cancellable_by(&token);
    let waiter = std::thread::spawn(move || {
        let outcome = lock.lock().map(drop);
        (outcome, Instant::now())
    });
    assert!(eventually(Duration::from_secs(5), || subscribers(
        &redis,
        "redisson_lock__channel:{job}"
    ) == 1));
    let cancelled_at = Instant::now();
    token.cancel();
    let (outcome, returned_at) = waiter.join().unwrap();
    assert!(matches!(outcome, Err(Error::Cancelled)), "{outcome:?}");
    let took = returned_at - cancelled_at;
    println!("cancelled wait returned after {took:?}");
    assert!(took < PROMPTLY, "{took:?}");
    assert_nothing_left(&waiting, &redis);
    // The token stays cancelled; a handle without it still waits and takes the lock.
    assert!(token.is_cancelled());
    drop(held);
    assert!(waiting.lock("job").try_lock().unwrap().is_some());
}

#[test]
fn a_fair_lock_waiter_cancelled_mid_queue_leaves_the_queue_clean() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let lock = manager.fair_lock("line");
    let held = lock.lock().unwrap();
    let queue = "redisson_lock_queue:{line}";
    let token = CancelToken::new();
    let mut waiters = Vec::new();
    for index in 0..3 {
        let lock = match index {
            1 => lock.cancellable_by(&token),
            _ => lock.clone(),
        };
        waiters.push(std::thread::spawn(move || lock.lock().map(drop)));
        assert!(eventually(Duration::from_secs(5), || {
            connection(&redis).llen::<_, usize>(queue).unwrap() == index + 1
        }));
    }
    let before: Vec<String> = connection(&redis).lrange(queue, 0, -1).unwrap();
    token.cancel();
    let cancelled = waiters.remove(1).join().unwrap();
    assert!(matches!(cancelled, Err(Error::Cancelled)), "{cancelled:?}");
    let after: Vec<String> = connection(&redis).lrange(queue, 0, -1).unwrap();
    assert_eq!(after, vec![before[0].clone(), before[2].clone()]);
    let places: Vec<String> = connection(&redis)
        .zrange("redisson_lock_timeout:{line}", 0, -1)
        .unwrap();
    assert_eq!(places.len(), 2, "{places:?}");
    drop(held);
    for waiter in waiters {
        waiter.join().unwrap().unwrap();
    }
    let left: usize = connection(&redis).llen(queue).unwrap();
    assert_eq!(left, 0);
    assert_nothing_left(&manager, &redis);
}

#[test]
fn cancelled_waits_of_a_redlock_and_a_latch_return_too() {
    let servers = [server(), server(), server()];
    let managers: Vec<_> = servers
        .iter()
        .map(|server| manager(server, Duration::from_secs(30)))
        .collect();
    let others: Vec<_> = servers
        .iter()
        .map(|server| manager(server, Duration::from_secs(30)))
        .collect();
    let held = RedLock::from_managers(&others, "group")
        .unwrap()
        .lock()
        .unwrap();
    let latch = managers[0].count_down_latch("gate");
    assert!(latch.try_set_count(1).unwrap());
    let token = CancelToken::new();
    let redlock = RedLock::from_managers(&managers, "group")
        .unwrap()
        .cancellable_by(&token);
    let gate = latch.cancellable_by(&token);
    let redlock_waiter = std::thread::spawn(move || redlock.lock().map(drop));
    let latch_waiter = std::thread::spawn(move || gate.wait());
    // The first manager also carries the latch's channel.
    assert!(eventually(Duration::from_secs(5), || managers
        .iter()
        .enumerate()
        .all(
            |(index, manager)| manager.subscribed_channels() == 1 + usize::from(index == 0)
        )));
    token.cancel();
    let started = Instant::now();
    assert!(matches!(
        redlock_waiter.join().unwrap(),
        Err(Error::Cancelled)
    ));
    assert!(matches!(
        latch_waiter.join().unwrap(),
        Err(Error::Cancelled)
    ));
    assert!(started.elapsed() < PROMPTLY * 2, "{:?}", started.elapsed());
    drop(held);
    for (manager, server) in managers.iter().zip(&servers) {
        assert!(eventually(Duration::from_secs(5), || manager
            .subscribed_channels()
            == 0));
        assert_nothing_left(manager, server);
    }
}

#[test]
fn try_lock_until_a_past_instant_makes_exactly_one_attempt() {
    let redis = server();
    let holder = manager(&redis, Duration::from_secs(30));
    let waiting = manager(&redis, Duration::from_secs(30));
    let held = holder.lock("once").lock().unwrap();
    let past = Instant::now() - Duration::from_millis(10);
    redis.command(&["CONFIG", "RESETSTAT"]).unwrap();
    assert!(waiting.lock("once").try_lock_until(past).unwrap().is_none());
    let stats = redis.command(&["INFO", "commandstats"]).unwrap();
    let scripts = stats
        .lines()
        .find(|line| line.starts_with("cmdstat_evalsha:"))
        .expect("one script call");
    assert!(scripts.starts_with("cmdstat_evalsha:calls=1,"), "{scripts}");
    assert!(
        !stats.contains("cmdstat_subscribe"),
        "it subscribed: {stats}"
    );
    // A future deadline waits for it, and gets the lock once it is free.
    let lock = waiting.lock("once");
    let waiter = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        lock.try_lock_until(deadline).unwrap().is_some()
    });
    drop(held);
    assert!(waiter.join().unwrap());
    assert_nothing_left(&waiting, &redis);
}

#[test]
fn with_lock_releases_on_return_on_panic_and_reports_a_lost_lock() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let other = common::manager(&redis, Duration::from_secs(30));
    let lock = manager.lock("scoped");

    let answer = lock.with_lock(|guard| guard.fencing_token() * 2).unwrap();
    assert!(answer > 0);
    assert!(!lock.is_locked().unwrap());

    let panicked = catch_unwind(AssertUnwindSafe(|| {
        lock.with_lock(|_| panic!("the work failed")).unwrap();
    }));
    assert!(panicked.is_err());
    assert!(!lock.is_locked().unwrap(), "the panic left the lock held");
    assert!(!lock.is_held_by_current_thread());

    // Lost while the work ran: the caller hears of it.
    let lost = lock.with_lock(|_| {
        assert!(other.lock("scoped").break_lock().unwrap());
        "done"
    });
    assert!(
        matches!(
            lost,
            Err(Error::NotHeld { .. }) | Err(Error::LockLost { .. })
        ),
        "{lost:?}"
    );

    // Waiting at most a while: the work does not run when the lock stays held.
    let held = other.lock("scoped").lock().unwrap();
    let ran = std::thread::spawn({
        let lock = lock.clone();
        move || {
            lock.with_lock_for(Duration::from_millis(100), |_| ())
                .unwrap()
        }
    })
    .join()
    .unwrap();
    assert!(ran.is_none());
    drop(held);
    let lost = lock
        .leased_for(Duration::from_secs(5))
        .with_lock(|guard| guard.is_lost());
    assert!(!lost.unwrap());
    assert_nothing_left(&manager, &redis);
}

/// A deployment whose proxy does not carry pub/sub (here: every `SUBSCRIBE` cut): a manager
/// built without it opens no subscription, and its waiters poll: a lock's, a spin lock's, a
/// fair lock's (granted by a message it does not hear), a semaphore's and a latch's each end
/// soon after what they wait for, long before any lease would run out.
#[test]
fn a_manager_without_pubsub_builds_behind_a_proxy_that_cuts_subscribe_and_its_waiters_poll() {
    let redis = server();
    let proxy = redlease_testing::CuttingProxy::start(redis.port()).unwrap();
    proxy.cut_next_times(&["SUBSCRIBE"], u32::MAX);
    let polling = redlease::LockManager::builder(proxy.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .without_pubsub()
        .build()
        .expect("built without pub/sub");
    let direct = manager(&redis, Duration::from_secs(30));
    let held = [
        direct.lock("plain").lock().unwrap(),
        direct.lock("spun").lock().unwrap(),
        direct.fair_lock("queued").lock().unwrap(),
    ];
    let latch = direct.count_down_latch("started");
    assert!(latch.try_set_count(1).unwrap());
    let slots = direct.semaphore("slots");
    assert!(slots.try_set_permits(0).unwrap());
    let lock = polling.lock("plain");
    let spin = polling.spin_lock("spun", redlease::BackOff::default());
    let fair = polling.fair_lock("queued");
    let waiting_slots = polling.semaphore("slots");
    let waiting_latch = polling.count_down_latch("started");
    let patience = Duration::from_secs(20);
    let waiters = [
        std::thread::spawn(move || lock.try_lock_for(patience).unwrap().is_some()),
        std::thread::spawn(move || spin.try_lock_for(patience).unwrap().is_some()),
        std::thread::spawn(move || fair.try_lock_for(patience).unwrap().is_some()),
        std::thread::spawn(move || waiting_slots.try_acquire_for(1, patience).unwrap()),
        std::thread::spawn(move || waiting_latch.wait_for(patience).unwrap()),
    ];
    assert!(eventually(patience, || polling.stats().waiting == 5));
    assert_eq!(polling.subscribed_channels(), 0);
    let released_at = Instant::now();
    drop(held);
    slots.release(1).unwrap();
    latch.count_down().unwrap();
    for waiter in waiters {
        assert!(
            waiter.join().unwrap(),
            "the waiter ended with what it waited for"
        );
    }
    // The leases had 30 s left and nothing was published to this manager: it polled.
    let took = released_at.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(proxy.cuts(), 0, "no SUBSCRIBE was sent");
}
