//! The synchronizers under contention through faults: several processes take a lock, a fair
//! lock and a semaphore of two permits, and count a latch down and wait for it, through a
//! proxy that resets every connection and adds latency, while Redis (with an append-only
//! file, so that a restart keeps what it acknowledged) is paused and restarted, at seeded
//! random times. Every process records, on the host's monotonic clock, when each of its
//! holds began and ended; the checks: never two holders of a lock or a fair lock at once, never
//! more than two of the semaphore, the latch open only after its last count-down was sent,
//! and nothing left once the faults stop (every permit back, no lock key, no place in line,
//! no undo pending, every request key with an expiry).
//!
//! 20 s by default; `REDLEASE_CHAOS_SECONDS=60 REDLEASE_CHAOS_SEED=7 cargo test --release
//! --test chaos -- --nocapture` for a longer run with a chosen seed (the seed is printed).

mod common;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    child_role, env, error_name, events_path, now_ns, spawn_child, KillOnDrop, Random, RedisServer,
};
use redlease::{Error, LockManager};
use redlease_testing::CuttingProxy;

const PROCESSES: usize = 3;
/// Count-downs per process: the latch's count is this times [`PROCESSES`].
const COUNT_DOWNS: usize = 5;
const PERMITS: usize = 2;
const LOCK: &str = "chaos:lock";
const FAIR: &str = "chaos:fair";
const SEMAPHORE: &str = "chaos:semaphore";
const LATCH: &str = "chaos:latch";

#[test]
fn synchronizers_keep_their_promises_through_resets_latency_pauses_and_restarts() {
    let seconds: u64 = std::env::var("REDLEASE_CHAOS_SECONDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("REDLEASE_CHAOS_SEED")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| now_ns() | 1);
    println!("chaos: {seconds} s, seed {seed}");
    let mut redis =
        RedisServer::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"])
            .expect("redis-server");
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let setup = manager(&proxy.url());
    let latch = setup.count_down_latch(LATCH);
    assert!(latch
        .try_set_count((PROCESSES * COUNT_DOWNS) as u64)
        .unwrap());
    assert!(setup
        .semaphore(SEMAPHORE)
        .try_set_permits(PERMITS as u32)
        .unwrap());

    let dir = std::env::temp_dir().join(format!("redlease-chaos-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let run_until_ns = now_ns() + seconds * 1_000_000_000;
    let mut children: Vec<KillOnDrop> = (0..PROCESSES)
        .map(|index| {
            spawn_child(
                "chaos_process",
                "chaos",
                &[
                    ("REDLEASE_TEST_URL", proxy.url()),
                    ("REDLEASE_CHAOS_UNTIL", run_until_ns.to_string()),
                    ("REDLEASE_CHAOS_SEED", (seed + index as u64).to_string()),
                    (
                        "REDLEASE_CHAOS_EVENTS",
                        events_path(&dir, index).display().to_string(),
                    ),
                ],
            )
        })
        .collect();

    let faults = inject_faults(&mut redis, &proxy, seed, run_until_ns);
    for child in &mut children {
        let status = child.wait_within(Duration::from_secs(seconds + 90));
        assert!(status.success(), "a chaos process failed");
    }
    println!("chaos: faults {faults:?}");
    let events: Vec<Event> = (0..PROCESSES)
        .flat_map(|index| read_events(&events_path(&dir, index)))
        .collect();
    let _ = fs::remove_dir_all(&dir);
    check(&events);
    assert_nothing_left(&setup, &redis);
}

/// Child side of the test above: the workers of one process.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn chaos_process() {
    if child_role().as_deref() != Some("chaos") {
        return;
    }
    let manager = manager(&env("REDLEASE_TEST_URL"));
    let until: u64 = env("REDLEASE_CHAOS_UNTIL").parse().unwrap();
    let seed: u64 = env("REDLEASE_CHAOS_SEED").parse().unwrap();
    let (sender, events) = crossbeam_channel::unbounded::<String>();
    let counting_done = Arc::new(AtomicBool::new(false));
    std::thread::scope(|scope| {
        for worker in 0..2u64 {
            let (manager, sender) = (&manager, sender.clone());
            scope.spawn(move || {
                hold_repeatedly("lock", until, seed + worker, &sender, || {
                    let guard = manager.lock(LOCK).try_lock_for(Duration::from_secs(5))?;
                    Ok(guard.map(|guard| {
                        Box::new(move || (guard.is_lost(), guard.unlock().map(drop)))
                            as Box<dyn FnOnce() -> (bool, redlease::Result<()>)>
                    }))
                })
            });
        }
        {
            let (manager, sender) = (&manager, sender.clone());
            scope.spawn(move || {
                hold_repeatedly("fair", until, seed + 7, &sender, || {
                    let guard = manager
                        .fair_lock(FAIR)
                        .try_lock_for(Duration::from_secs(5))?;
                    Ok(guard.map(|guard| {
                        Box::new(move || (guard.is_lost(), guard.unlock().map(drop)))
                            as Box<dyn FnOnce() -> (bool, redlease::Result<()>)>
                    }))
                })
            });
        }
        for worker in 0..2u64 {
            let (manager, sender) = (&manager, sender.clone());
            scope.spawn(move || {
                hold_repeatedly("semaphore", until, seed + 11 + worker, &sender, || {
                    let semaphore = manager.semaphore(SEMAPHORE);
                    let taken = semaphore.try_acquire_for(1, Duration::from_secs(5))?;
                    Ok(taken.then(|| {
                        Box::new(move || (false, semaphore.release(1)))
                            as Box<dyn FnOnce() -> (bool, redlease::Result<()>)>
                    }))
                })
            });
        }
        {
            let (manager, sender, done) = (&manager, sender.clone(), &counting_done);
            scope.spawn(move || count_down(manager, until, seed + 13, &sender, done));
        }
        {
            let (manager, sender) = (&manager, sender.clone());
            scope.spawn(move || wait_for_latch(manager, until, &sender));
        }
    });
    drop(sender);
    let mut file = fs::File::create(env("REDLEASE_CHAOS_EVENTS")).unwrap();
    for line in events.iter() {
        writeln!(file, "{line}").unwrap();
    }
    // What a failed call left is undone by the cleanup thread once Redis answers.
    let deadline = Instant::now() + Duration::from_secs(60);
    while manager.stats().cleanup_pending > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(manager.stats().cleanup_pending, 0, "undos still pending");
}

fn manager(url: &str) -> LockManager {
    LockManager::builder(url)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(Duration::from_secs(10))
        .outage_grace(Duration::from_secs(20))
        .build()
        .expect("build manager")
}

/// A taken hold: when let go, whether it was known lost and how its release went.
type Release = Box<dyn FnOnce() -> (bool, redlease::Result<()>)>;

/// Takes and lets go of one primitive until `until`, recording each hold as
/// `<kind> <began> <ended> <lost>` and each failure as `<kind>-error <what>`.
fn hold_repeatedly(
    kind: &str,
    until: u64,
    seed: u64,
    events: &crossbeam_channel::Sender<String>,
    mut take: impl FnMut() -> redlease::Result<Option<Release>>,
) {
    let mut random = Random(seed | 1);
    while now_ns() < until {
        match take() {
            Ok(Some(release)) => {
                let began = now_ns();
                std::thread::sleep(random.millis(1, 15));
                let ended = now_ns();
                let (lost, released) = release();
                let _ = events.send(format!("{kind} {began} {ended} {lost}"));
                if let Err(err) = released {
                    let _ = events.send(format!("{kind}-release-error {}", error_name(&err)));
                }
            }
            Ok(None) => {}
            Err(err) => {
                let _ = events.send(format!("{kind}-error {}", error_name(&err)));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        std::thread::sleep(random.millis(0, 5));
    }
}

/// Counts the latch down [`COUNT_DOWNS`] times, spread over the first half of the run,
/// recording `countdown <sent> <outcome>`; a call that surely did not run is sent again.
fn count_down(
    manager: &LockManager,
    until: u64,
    seed: u64,
    events: &crossbeam_channel::Sender<String>,
    done: &AtomicBool,
) {
    let mut random = Random(seed | 1);
    let latch = manager.count_down_latch(LATCH);
    let spread = (until.saturating_sub(now_ns()) / 2) / COUNT_DOWNS as u64;
    for _ in 0..COUNT_DOWNS {
        std::thread::sleep(Duration::from_nanos(random.below(spread)));
        loop {
            let sent = now_ns();
            match latch.count_down() {
                Ok(()) => {
                    let _ = events.send(format!("countdown {sent} ok"));
                    break;
                }
                Err(Error::Indeterminate { .. }) => {
                    let _ = events.send(format!("countdown {sent} indeterminate"));
                    break;
                }
                // Every send refused: it did not run, and may be sent anew.
                Err(err) if now_ns() < until => {
                    let _ = events.send(format!("countdown-error {}", error_name(&err)));
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(err) => panic!("a count-down failed to the end: {err}"),
            }
        }
    }
    done.store(true, Ordering::SeqCst);
}

/// Waits for the latch until the end of the run, recording `opened <at>`.
fn wait_for_latch(manager: &LockManager, until: u64, events: &crossbeam_channel::Sender<String>) {
    let latch = manager.count_down_latch(LATCH);
    while now_ns() < until {
        let left = Duration::from_nanos(until.saturating_sub(now_ns()));
        match latch.wait_for(left) {
            Ok(true) => {
                let _ = events.send(format!("opened {}", now_ns()));
                return;
            }
            Ok(false) => return,
            Err(err) => {
                let _ = events.send(format!("latch-error {}", error_name(&err)));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

#[derive(Debug, Default)]
struct Faults {
    resets: u32,
    latencies: u32,
    pauses: u32,
    restarts: u32,
}

/// Until `until`, every 0.3 to 1.5 s: all connections reset, latency for a while, Redis
/// paused for up to 2.5 s, or Redis restarted (its data kept in the append-only file).
fn inject_faults(redis: &mut RedisServer, proxy: &CuttingProxy, seed: u64, until: u64) -> Faults {
    let mut random = Random(seed | 1);
    let mut faults = Faults::default();
    // Let every process start first.
    std::thread::sleep(Duration::from_secs(1));
    while now_ns() + 3_000_000_000 < until {
        std::thread::sleep(random.millis(300, 1500));
        match random.below(4) {
            0 => {
                proxy.reset_all();
                faults.resets += 1;
            }
            1 => {
                proxy.set_latency(random.millis(20, 300));
                std::thread::sleep(random.millis(200, 1500));
                proxy.set_latency(Duration::ZERO);
                faults.latencies += 1;
            }
            2 => {
                redis.pause().unwrap();
                std::thread::sleep(random.millis(100, 2500));
                redis.resume().unwrap();
                faults.pauses += 1;
            }
            _ => {
                redis.restart().unwrap();
                faults.restarts += 1;
            }
        }
    }
    faults
}

#[derive(Debug)]
enum Event {
    Hold {
        kind: String,
        began: u64,
        ended: u64,
        lost: bool,
    },
    CountDown {
        sent: u64,
        applied: bool,
    },
    Opened {
        at: u64,
    },
    Error {
        what: String,
    },
}

fn read_events(path: &Path) -> Vec<Event> {
    let text = fs::read_to_string(path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    text.lines()
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                [kind, began, ended, lost] => Event::Hold {
                    kind: kind.to_string(),
                    began: began.parse().unwrap(),
                    ended: ended.parse().unwrap(),
                    lost: *lost == "true",
                },
                ["countdown", sent, outcome] => Event::CountDown {
                    sent: sent.parse().unwrap(),
                    applied: *outcome == "ok",
                },
                ["opened", at] => Event::Opened {
                    at: at.parse().unwrap(),
                },
                [kind, what] => Event::Error {
                    what: format!("{kind} {what}"),
                },
                _ => panic!("{line:?}"),
            }
        })
        .collect()
}

fn check(events: &[Event]) {
    let holds = |wanted: &str| -> Vec<(u64, u64)> {
        events
            .iter()
            .filter_map(|event| match event {
                Event::Hold {
                    kind,
                    began,
                    ended,
                    lost: false,
                } if kind == wanted => Some((*began, *ended)),
                _ => None,
            })
            .collect()
    };
    let lost = events
        .iter()
        .filter(|event| matches!(event, Event::Hold { lost: true, .. }))
        .count();
    let mut errors = std::collections::BTreeMap::<&str, usize>::new();
    for event in events {
        if let Event::Error { what } = event {
            *errors.entry(what).or_default() += 1;
        }
    }
    let (locks, fair, permits) = (holds("lock"), holds("fair"), holds("semaphore"));
    println!(
        "chaos: holds: lock {}, fair {}, semaphore {}; lost {lost}; errors {errors:?}",
        locks.len(),
        fair.len(),
        permits.len()
    );
    assert!(!locks.is_empty() && !fair.is_empty() && !permits.is_empty());
    assert_eq!(most_at_once(&locks), 1, "two holders of the lock at once");
    assert_eq!(
        most_at_once(&fair),
        1,
        "two holders of the fair lock at once"
    );
    assert!(
        most_at_once(&permits) <= PERMITS,
        "more holders of the semaphore than permits: {}",
        most_at_once(&permits)
    );

    let mut sent: Vec<(u64, bool)> = events
        .iter()
        .filter_map(|event| match event {
            Event::CountDown { sent, applied } => Some((*sent, *applied)),
            _ => None,
        })
        .collect();
    sent.sort_unstable();
    assert_eq!(
        sent.len(),
        PROCESSES * COUNT_DOWNS,
        "every count-down was sent"
    );
    let last_sent = sent.last().unwrap().0;
    let opened: Vec<u64> = events
        .iter()
        .filter_map(|event| match event {
            Event::Opened { at } => Some(*at),
            _ => None,
        })
        .collect();
    for at in &opened {
        assert!(
            *at >= last_sent,
            "the latch opened {} ms before its last count-down was sent",
            (last_sent - at) / 1_000_000
        );
    }
    if sent.iter().all(|(_, applied)| *applied) {
        assert_eq!(opened.len(), PROCESSES, "every waiter saw the latch open");
    }
}

/// The most intervals that overlap at one instant.
fn most_at_once(intervals: &[(u64, u64)]) -> usize {
    let mut edges: Vec<(u64, i32)> = intervals
        .iter()
        .flat_map(|&(began, ended)| [(began, 1), (ended, -1)])
        .collect();
    // An end before a beginning at the same instant: touching is not overlapping.
    edges.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

fn assert_nothing_left(manager: &LockManager, redis: &RedisServer) {
    let semaphore = manager.semaphore(SEMAPHORE);
    let settled = common::eventually(Duration::from_secs(30), || {
        semaphore.available_permits().ok() == Some(PERMITS as u64)
            && !manager.lock(LOCK).is_locked().unwrap_or(true)
            && !manager.fair_lock(FAIR).is_locked().unwrap_or(true)
            && redis
                .command(&["LLEN", "redisson_lock_queue:{chaos:fair}"])
                .is_ok_and(|reply| reply == ":0\r\n")
    });
    assert!(
        settled,
        "left behind: {} permits of {PERMITS}, lock {:?}, fair lock {:?}, queue {:?}",
        semaphore.available_permits().unwrap_or(0),
        manager.lock(LOCK).is_locked(),
        manager.fair_lock(FAIR).is_locked(),
        redis.command(&["LLEN", "redisson_lock_queue:{chaos:fair}"])
    );
    let keys = redis
        .command(&["KEYS", "redlease_request:*"])
        .unwrap_or_default();
    for key in keys
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("redlease_request"))
    {
        // (-2: gone since, deleted or expired.)
        let ttl = redis.command(&["PTTL", key]).unwrap();
        assert!(!ttl.starts_with(":-1"), "{key} has no expiry: {ttl}");
    }
}
