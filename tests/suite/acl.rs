//! A Redis ACL user with exactly the permissions the guide lists (`guide::permissions`) can use every primitive:
//! lock and unlock, wait for a release, force a release, write through a fenced store, keep
//! a lock by renewal, and take a Redlock over three servers.
//!
//! To see that a rule is needed, run with `REDLEASE_TEST_ACL_WITHOUT=<rule>` (such as
//! `+pexpire`): the user is then created without it, and the tests that need it fail.
//! `+eval` is the exception: it serves only the undo of an acquisition whose answer never
//! came, which these tests do not provoke.
//!
//! And what a user is refused comes back typed, at once: wrong credentials fail the build
//! with `AuthenticationFailed`, so does a user without `SUBSCRIBE` with `PermissionDenied`;
//! a missing `EVALSHA`, a lock outside the user's keys, a release channel outside its
//! channels fail the first call that needs them with `PermissionDenied`, naming what was
//! refused; a manager built without pub/sub serves a user without `SUBSCRIBE`.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, manager_for_url, RedisServer};
use redlease::{Error, Finding, LockManager, LostReason, Permission, RedLock, ServerCheck};

const USER: &str = "redlease";
const PASSWORD: &str = "redlease-secret";

/// The commands of the guide's list (`guide::permissions`), as `ACL SETUSER` rules.
const COMMANDS: &[&str] = &[
    // Sent by the crate itself.
    "+ping",
    "+evalsha",
    "+eval",
    "+script|load",
    "+exists",
    "+hexists",
    "+hget",
    "+pttl",
    "+get",
    "+unlink",
    "+subscribe",
    "+unsubscribe",
    // The server check at build, and the count of replicas in sync.
    "+info",
    // The acknowledgements of a master with replicas (by default).
    "+wait",
    // Run by its scripts.
    "+time",
    "+type",
    "+set",
    "+del",
    "+incr",
    "+hset",
    "+hincrby",
    "+hlen",
    "+hkeys",
    "+pexpire",
    "+publish",
    // The fair lock's scripts.
    "+lindex",
    "+lpop",
    "+rpush",
    "+lrange",
    "+lrem",
    "+zscore",
    "+zadd",
    "+zrem",
    "+zrange",
    "+zincrby",
    // The read-write lock's scripts (and a revocation request's).
    "+hdel",
    "+hgetall",
    // An election's scripts and its observers.
    "+hmget",
    "+xadd",
    "+xrange",
    "+xrevrange",
];

/// The keys: the lock names and fenced store keys of these tests (all under `acl:`), and the
/// keys the crate derives from them. The release channel is passed to the scripts as a key
/// (as Redisson does), so the server checks it against the key patterns too.
const KEYS: &[&str] = &[
    "~acl:*",
    "~redisson_lock_token:*",
    "~redisson_unlock_latch:*",
    "~redlease_request:*",
    "~redisson_lock__channel:*",
    "~redlease_fence:*",
    "~redisson_lock_queue:*",
    "~redisson_lock_timeout:*",
    "~redlease_lock_grants:*",
    "~{acl:*",
    "~redisson_rwlock:*",
    "~redlease_leader:*",
    "~redlease_leader_log:*",
    "~redlease_leader__channel:*",
];

/// The release channels and the force-release notice channel.
const CHANNELS: &[&str] = &[
    "&redisson_lock__channel*",
    "&redlease_lock__force_release",
    "&redisson_rwlock*",
    "&redlease_leader__channel*",
];

/// How long the tests give a "no hang" condition.
const PATIENCE: Duration = Duration::from_secs(10);
/// The watchdog timeout where renewals must not matter: one every 10 s.
const LONG_WATCHDOG: Duration = Duration::from_secs(30);

/// The connect and response timeouts of the managers whose calls are refused: a refusal
/// must end a call well before them, which shows that the refusal ended it.
const SLOW_TIMEOUT: Duration = Duration::from_secs(5);

/// A throwaway server with the restricted user, and the URL that logs in as that user.
fn server_with_user() -> (RedisServer, String) {
    let server = common::server();
    let without = std::env::var("REDLEASE_TEST_ACL_WITHOUT").ok();
    let url = create_user(&server, USER, |rule| Some(rule) != without.as_deref(), &[]);
    (server, url)
}

/// Creates the user `name` with the rules of the lists above that `keep` keeps, and the
/// `extra` ones; answers the URL that logs in as it.
fn create_user(
    server: &RedisServer,
    name: &str,
    keep: impl Fn(&str) -> bool,
    extra: &[&str],
) -> String {
    let password = format!(">{PASSWORD}");
    let mut words = vec![
        "ACL",
        "SETUSER",
        name,
        "reset",
        "on",
        &password,
        "resetchannels",
    ];
    words.extend(
        KEYS.iter()
            .chain(CHANNELS)
            .chain(COMMANDS)
            .copied()
            .filter(|rule| keep(rule)),
    );
    words.extend(extra);
    let answer = server.command(&words).unwrap();
    assert!(answer.starts_with("+OK"), "ACL SETUSER: {answer}");
    let url = format!("redis://{name}:{PASSWORD}@127.0.0.1:{}/", server.port());
    assert_user_is_restricted(&url);
    url
}

/// Builds a manager for `url` with [`SLOW_TIMEOUT`]s, answering what `build` answered.
fn build(url: &str) -> redlease::Result<LockManager> {
    LockManager::builder(url)
        .connect_timeout(SLOW_TIMEOUT)
        .response_timeout(SLOW_TIMEOUT)
        .watchdog_timeout(LONG_WATCHDOG)
        .build()
}

/// Runs `call` on a thread of its own and answers what it returned and how long it took;
/// fails the test when it has not returned within [`PATIENCE`] (it hangs).
fn returns_in_time<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> (T, Duration) {
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        let answer = call();
        let _ = done.send((answer, started.elapsed()));
    });
    outcome
        .recv_timeout(PATIENCE)
        .expect("the call did not return in time")
}

/// Asserts that `outcome` is a refusal for lack of `expected`, told well before the
/// timeouts of a [`build`] manager.
fn assert_denied<T: std::fmt::Debug>(
    (outcome, took): (redlease::Result<T>, Duration),
    expected: impl Fn(&Permission) -> bool,
) {
    match &outcome {
        Err(
            err @ Error::PermissionDenied {
                permission,
                message,
            },
        ) => {
            assert!(expected(permission), "{err}");
            assert!(
                message.starts_with("NOPERM") || message.starts_with("ERR"),
                "{err}"
            );
            assert!(!err.is_transient());
        }
        other => panic!("not a refused permission: {other:?}"),
    }
    assert!(took < SLOW_TIMEOUT / 2, "told after {took:?}");
}

/// Guards against a test that passes because the URL did not log in as the user.
fn assert_user_is_restricted(url: &str) {
    let mut connection = redis::Client::open(url)
        .unwrap()
        .get_connection()
        .expect("log in as the restricted user");
    let refused = redis::cmd("FLUSHALL").query::<()>(&mut connection);
    let message = format!("{refused:?}");
    assert!(message.contains("no permissions"), "FLUSHALL: {message}");
}

/// How many connections are subscribed to `channel`, as the server sees it.
fn subscribers(server: &RedisServer, channel: &str) -> usize {
    let answer = server
        .command(&["PUBSUB", "NUMSUB", channel])
        .expect("PUBSUB NUMSUB");
    // `*2\r\n$<len>\r\n<channel>\r\n:<count>\r\n`
    answer
        .rsplit(':')
        .next()
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or_else(|| panic!("PUBSUB NUMSUB: {answer:?}"))
}

#[test]
fn lock_and_unlock_with_reentrant_levels() {
    let (_server, url) = server_with_user();
    let manager = manager_for_url(&url, LONG_WATCHDOG);
    let lock = manager.lock("acl:plain");
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    assert!(lock.is_locked().unwrap());
    assert!(lock.is_held_by_current_thread());
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert!(lock.remaining_ttl().unwrap().is_some());
    inner.unlock().unwrap();
    outer.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn a_waiter_of_another_manager_is_woken_by_the_release() {
    let (server, url) = server_with_user();
    let holder_manager = manager_for_url(&url, LONG_WATCHDOG);
    let waiter_manager = manager_for_url(&url, LONG_WATCHDOG);
    let guard = holder_manager.lock("acl:contended").lock().unwrap();
    let waiter_lock = waiter_manager.lock("acl:contended");
    let waiter = std::thread::spawn(move || {
        let guard = waiter_lock
            .try_lock_for(PATIENCE)
            .unwrap()
            .expect("woken by the release");
        let taken_at = Instant::now();
        guard.unlock().unwrap();
        taken_at
    });
    // The waiter sleeps on the release channel, which the server must have let it join.
    assert!(
        eventually(PATIENCE, || subscribers(
            &server,
            "redisson_lock__channel:{acl:contended}"
        ) == 1),
        "the waiter never subscribed to the release channel"
    );
    let released_at = Instant::now();
    guard.unlock().unwrap();
    let taken_at = waiter.join().unwrap();
    // The holder's lease had 30 s left: only the release message wakes the waiter this soon.
    let woken_after = taken_at.duration_since(released_at);
    assert!(woken_after < Duration::from_secs(2), "{woken_after:?}");
    assert!(
        eventually(PATIENCE, || subscribers(
            &server,
            "redisson_lock__channel:{acl:contended}"
        ) == 0),
        "the waiter never left the release channel"
    );
}

#[test]
fn a_break_lock_reaches_the_holder_through_the_notice_channel() {
    let (server, url) = server_with_user();
    let holder_manager = manager_for_url(&url, LONG_WATCHDOG);
    let other_manager = manager_for_url(&url, LONG_WATCHDOG);
    // Both managers listen to the notice channel once the server has let them join it.
    assert!(
        eventually(PATIENCE, || subscribers(
            &server,
            "redlease_lock__force_release"
        ) == 2),
        "the managers never subscribed to the notice channel"
    );
    let guard = holder_manager.lock("acl:forced").lock().unwrap();
    let lost = guard.lost_signal();
    let forced_at = Instant::now();
    assert!(other_manager.lock("acl:forced").break_lock().unwrap());
    assert_eq!(lost.recv_timeout(PATIENCE), Ok(LostReason::ForceReleased));
    // The next renewal would only come after 10 s: the notice told the holder.
    assert!(
        forced_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        forced_at.elapsed()
    );
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
}

#[test]
fn a_fenced_store_takes_the_newer_token_and_refuses_the_older() {
    let (_server, url) = server_with_user();
    let manager = manager_for_url(&url, LONG_WATCHDOG);
    let lock = manager.lock("acl:fenced");
    let report = manager.fenced_store("acl:report");
    let first = lock.lock().unwrap();
    let stale_token = first.fencing_token();
    first.unlock().unwrap();
    let second = lock.lock().unwrap();
    report.set(second.fencing_token(), "by the second").unwrap();
    assert!(matches!(
        report.set(stale_token, "by the first"),
        Err(Error::StaleToken { .. })
    ));
    assert_eq!(
        report.get::<String>().unwrap().as_deref(),
        Some("by the second")
    );
    second.unlock().unwrap();
}

#[test]
fn renewals_keep_a_lock_past_its_first_lease() {
    let (_server, url) = server_with_user();
    let watchdog = Duration::from_secs(1);
    let manager = manager_for_url(&url, watchdog);
    let lock = manager.lock("acl:renewed");
    let guard = lock.lock().unwrap();
    // Held for two leases: without renewals the lock would be gone and the guard lost.
    std::thread::sleep(watchdog * 2);
    assert!(!guard.is_lost());
    assert!(lock.is_held_by_current_thread());
    assert_eq!(
        lock.hold_count().unwrap(),
        1,
        "renewed, as Redis records it"
    );
    guard.unlock().unwrap();
}

#[test]
fn a_redlock_over_three_servers_with_the_user() {
    let (servers, urls): (Vec<RedisServer>, Vec<String>) =
        (0..3).map(|_| server_with_user()).unzip();
    let managers: Vec<LockManager> = urls
        .iter()
        .map(|url| manager_for_url(url, LONG_WATCHDOG))
        .collect();
    let lock = RedLock::from_managers(&managers, "acl:redlock").unwrap();
    let rival_managers: Vec<LockManager> = urls
        .iter()
        .map(|url| manager_for_url(url, LONG_WATCHDOG))
        .collect();
    let rival = RedLock::from_managers(&rival_managers, "acl:redlock").unwrap();

    let guard = lock.lock().unwrap();
    assert_eq!(guard.held_members(), servers.len());
    assert!(guard.fencing_token() > 0);
    assert!(rival.try_lock().unwrap().is_none(), "held on every server");
    guard.unlock().unwrap();
    let rival_guard = rival.try_lock_for(PATIENCE).unwrap().expect("free again");
    rival_guard.unlock().unwrap();
}

/// The application's own `ConnectionInfo`, with the user and password in its settings rather
/// than a URL, passes through to every connection: commands, and the pub/sub connection that
/// wakes a waiter.
#[test]
fn a_connection_info_with_the_user_passes_through_to_every_connection() {
    let (server, _url) = server_with_user();
    use redis::IntoConnectionInfo;
    let info = ("127.0.0.1", server.port())
        .into_connection_info()
        .unwrap()
        .set_redis_settings(
            redis::RedisConnectionInfo::default()
                .set_username(USER)
                .set_password(PASSWORD),
        );
    let manager = LockManager::builder(info)
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(LONG_WATCHDOG)
        .build()
        .unwrap();
    let lock = manager.lock("acl:info");
    let held = lock.lock().unwrap();
    let waiter = std::thread::spawn({
        let lock = lock.clone();
        move || {
            let asked = Instant::now();
            drop(lock.lock().unwrap());
            asked.elapsed()
        }
    });
    // The waiter is subscribed through the pub/sub connection, which logged in as the user.
    assert!(eventually(PATIENCE, || subscribers(
        &server,
        "redisson_lock__channel:{acl:info}"
    ) == 1));
    held.unlock().unwrap();
    let waited = waiter.join().unwrap();
    assert!(waited < PATIENCE, "{waited:?}");
    // Logged in as the restricted user, not as the default one: a name outside its keys is
    // refused.
    let refused = manager.lock("outside").try_lock();
    assert!(
        matches!(
            &refused,
            Err(Error::PermissionDenied {
                permission: Permission::Key(_),
                ..
            })
        ),
        "{:?}",
        refused.map(|guard| guard.is_some())
    );
}

/// The fair lock (a waiter queued and woken in turn) and the read-write lock (read levels
/// renewed, a writer woken by the last reader) with the guide's additions for them.
#[test]
fn fair_and_read_write_locks_with_the_listed_additions() {
    let (_server, url) = server_with_user();
    let manager = manager_for_url(&url, Duration::from_millis(600));
    let fair = manager.fair_lock("acl:fair");
    let held = fair.lock().unwrap();
    let waiter = std::thread::spawn({
        let fair = fair.clone();
        move || fair.try_lock_for(PATIENCE).unwrap().is_some()
    });
    std::thread::sleep(Duration::from_millis(1_000)); // past the watchdog timeout, renewed
    assert!(!held.is_lost());
    held.unlock().unwrap();
    assert!(waiter.join().unwrap());

    let rw = manager.read_write_lock("acl:rw");
    let read = rw.read().lock().unwrap();
    let writer = std::thread::spawn({
        let rw = rw.clone();
        move || rw.write().try_lock_for(PATIENCE).unwrap().is_some()
    });
    std::thread::sleep(Duration::from_millis(1_000)); // past the watchdog timeout, renewed
    assert!(!read.is_lost());
    read.unlock().unwrap();
    assert!(writer.join().unwrap());
    assert_eq!(manager.watched_locks(), 0);
}

#[test]
fn elections_revocation_and_the_upgradable_read_with_the_listed_additions() {
    let (_server, url) = server_with_user();
    let manager = manager_for_url(&url, Duration::from_millis(600));
    let election = manager.leader_election("acl:leader");
    let mut observer = election.observe().unwrap();
    let leading = election.candidate("me").lock().unwrap();
    assert_eq!(election.leader().unwrap().unwrap().value, "me");
    assert_eq!(election.request_revocation().unwrap(), 1);
    assert!(eventually(PATIENCE, || leading.is_revocation_requested()));
    leading.unlock().unwrap();
    let elected = observer.next_change_for(PATIENCE).unwrap();
    assert!(matches!(elected, Some(redlease::LeaderChange::Elected(_))));
    let resigned = observer.next_change_for(PATIENCE).unwrap();
    assert!(matches!(
        resigned,
        Some(redlease::LeaderChange::Resigned(_))
    ));

    let rw = manager.read_write_lock("acl:upgradable");
    let upgradable = rw.upgradable().lock().unwrap();
    let writing = upgradable.upgrade().unwrap();
    upgradable.downgrade(writing).unwrap();
    upgradable.unlock().unwrap();
    assert_eq!(manager.watched_locks(), 0);
}

#[test]
fn a_wrong_password_or_an_unknown_user_fails_the_build() {
    let (server, _url) = server_with_user();
    for (user, password) in [(USER, "not-the-secret"), ("nobody", PASSWORD)] {
        let url = format!("redis://{user}:{password}@127.0.0.1:{}/", server.port());
        let started = Instant::now();
        let refused = build(&url);
        assert!(started.elapsed() < SLOW_TIMEOUT / 2, "{user}");
        match refused {
            Err(err @ Error::AuthenticationFailed { .. }) => {
                assert!(
                    matches!(&err, Error::AuthenticationFailed { user: Some(named) } if named == user),
                    "{err:?}"
                );
                let message = err.to_string();
                assert!(message.contains(user), "{message}");
                assert!(!message.contains(password), "{message}");
                assert!(!err.is_transient());
            }
            other => panic!("{user}: {:?}", other.map(|_| "built")),
        }
    }

    // A server that requires a password, and connection settings that give none.
    let answer = server
        .command(&["CONFIG", "SET", "requirepass", "server-secret"])
        .unwrap();
    assert!(answer.starts_with("+OK"), "{answer}");
    let refused = build(&server.url());
    assert!(
        matches!(refused, Err(Error::AuthenticationFailed { user: None })),
        "{:?}",
        refused.map(|_| "built")
    );
}

#[test]
fn a_user_without_evalsha_is_refused_it_at_the_first_acquisition() {
    let server = common::server();
    let url = create_user(&server, "no-evalsha", |rule| rule != "+evalsha", &[]);
    // The manager itself sends no script: it builds.
    let manager = build(&url).expect("build");
    let lock = manager.lock("acl:scripted");
    let is_evalsha = |permission: &Permission| *permission == Permission::Command("evalsha".into());
    let started = Instant::now();
    let tried = lock.try_lock().map(|guard| guard.is_some());
    assert_denied((tried, started.elapsed()), is_evalsha);
    let blocking = lock.clone();
    assert_denied(
        returns_in_time(move || blocking.lock().map(drop)),
        is_evalsha,
    );
    // What needs no script still works, and nothing was taken.
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn a_lock_outside_the_users_keys_is_refused_naming_keys() {
    let (server, url) = server_with_user();
    let manager = build(&url).expect("build");
    // Its token key matches `redisson_lock_token:*`; the lock's own key matches nothing.
    let lock = manager.lock("elsewhere:acl");
    let is_keys = |permission: &Permission| matches!(permission, Permission::Key(_));
    let started = Instant::now();
    let tried = lock.try_lock().map(|guard| guard.is_some());
    assert_denied((tried, started.elapsed()), is_keys);
    let blocking = lock.clone();
    assert_denied(returns_in_time(move || blocking.lock().map(drop)), is_keys);
    assert!(server
        .command(&["EXISTS", "elsewhere:acl"])
        .unwrap()
        .starts_with(":0"));
}

#[test]
fn a_user_without_subscribe_fails_the_build() {
    let server = common::server();
    let url = create_user(&server, "no-subscribe", |rule| rule != "+subscribe", &[]);
    let url_for_build = url.clone();
    let (refused, took) = returns_in_time(move || build(&url_for_build).map(|_| "built"));
    assert_denied((refused, took), |permission| {
        *permission == Permission::Command("subscribe".into())
    });
}

#[test]
fn a_wait_on_a_channel_outside_the_users_channels_fails_at_once() {
    let server = common::server();
    // The release channels of the locks named `acl:open...` only, and the notice channel.
    let url = create_user(
        &server,
        "few-channels",
        |rule| !rule.starts_with('&'),
        &[
            "&redisson_lock__channel:{acl:open*",
            "&redlease_lock__force_release",
        ],
    );
    let manager = build(&url).expect("build");
    // Held by a user that may do anything, so that only the waiters are refused.
    let admin = common::manager(&server, LONG_WATCHDOG);
    let closed = admin.lock("acl:closed").lock().unwrap();
    let is_channel = |permission: &Permission| matches!(permission, Permission::Channel(_));
    // Two waiters at once, with a deadline and without: each is told.
    let with_deadline = manager.lock("acl:closed");
    let without_deadline = manager.lock("acl:closed");
    let waiters = [
        std::thread::spawn(move || {
            returns_in_time(move || with_deadline.try_lock_for(PATIENCE).map(|g| g.is_some()))
        }),
        std::thread::spawn(move || returns_in_time(move || without_deadline.lock().map(|_| true))),
    ];
    for waiter in waiters {
        assert_denied(waiter.join().unwrap(), is_channel);
    }
    assert!(
        eventually(PATIENCE, || manager.subscribed_channels() == 0),
        "the refused channel was left: {}",
        manager.subscribed_channels()
    );
    closed.unlock().unwrap();

    // The refusal left the connection's answers in step: a channel the user may subscribe to
    // still wakes its waiter at the release.
    let open = admin.lock("acl:open").lock().unwrap();
    let waiter_lock = manager.lock("acl:open");
    let waiter = std::thread::spawn(move || {
        let guard = waiter_lock
            .try_lock_for(PATIENCE)
            .unwrap()
            .expect("woken by the release");
        let taken_at = Instant::now();
        guard.unlock().unwrap();
        taken_at
    });
    assert!(eventually(PATIENCE, || subscribers(
        &server,
        "redisson_lock__channel:{acl:open}"
    ) == 1));
    let released_at = Instant::now();
    open.unlock().unwrap();
    // The holder's lease had 30 s left: only the release message wakes the waiter this soon.
    let woken_after = waiter.join().unwrap().duration_since(released_at);
    assert!(woken_after < Duration::from_secs(2), "{woken_after:?}");
}

/// A user without `SUBSCRIBE` (as behind a proxy that carries no pub/sub): a manager built
/// without pub/sub serves it, and its spin lock waits, polling, and takes the lock once it
/// is released.
#[test]
fn a_manager_without_pubsub_serves_a_user_without_subscribe() {
    let server = common::server();
    let url = create_user(&server, "no-subscribe", |rule| rule != "+subscribe", &[]);
    let manager = LockManager::builder(url.as_str())
        .connect_timeout(SLOW_TIMEOUT)
        .response_timeout(SLOW_TIMEOUT)
        .without_pubsub()
        .build()
        .expect("built without pub/sub");
    let admin = common::manager(&server, LONG_WATCHDOG);
    let held = admin.lock("acl:polled").lock().unwrap();
    let spin = manager.spin_lock("acl:polled", redlease::BackOff::default());
    let waiter = std::thread::spawn(move || {
        let guard = spin.try_lock_for(PATIENCE).unwrap();
        guard.map(|guard| guard.unlock())
    });
    assert!(eventually(PATIENCE, || manager.stats().waiting == 1));
    held.unlock().unwrap();
    let taken = waiter.join().unwrap().expect("taken once released");
    taken.unwrap();
}

/// An ACL changed under a running manager: Redis drops the subscribed connection of a user
/// that lost a channel, and the manager subscribes again, channel by channel, so the
/// refused one does not take the others with it. Its waiter, subscribed before, polls.
#[test]
fn a_channel_refused_after_a_reconnect_leaves_the_others_subscribed() {
    let server = common::server();
    let url = create_user(&server, "changing", |_| true, &[]);
    let manager = build(&url).expect("build");
    let admin = common::manager(&server, LONG_WATCHDOG);
    let kept = admin.lock("acl:kept").lock().unwrap();
    let dropped = admin.lock("acl:dropped").lock().unwrap();
    let waiter = |name: &str| {
        let lock = manager.lock(name);
        std::thread::spawn(move || {
            let guard = lock.try_lock_for(PATIENCE).unwrap().expect("taken");
            (Instant::now(), guard.unlock())
        })
    };
    let (kept_waiter, dropped_waiter) = (waiter("acl:kept"), waiter("acl:dropped"));
    let kept_channel = "redisson_lock__channel:{acl:kept}";
    let dropped_channel = "redisson_lock__channel:{acl:dropped}";
    assert!(eventually(PATIENCE, || subscribers(&server, kept_channel)
        == 1
        && subscribers(&server, dropped_channel) == 1));

    let answer = server
        .command(&[
            "ACL",
            "SETUSER",
            "changing",
            "resetchannels",
            "&redisson_lock__channel:{acl:kept*",
            "&redlease_lock__force_release",
        ])
        .unwrap();
    assert!(answer.starts_with("+OK"), "{answer}");
    assert!(
        eventually(PATIENCE, || manager.stats().pubsub_reconnects >= 1
            && subscribers(&server, kept_channel) == 1),
        "the kept channel was not subscribed again"
    );
    assert_eq!(subscribers(&server, dropped_channel), 0);

    let released_at = Instant::now();
    kept.unlock().unwrap();
    let (taken_at, unlocked) = kept_waiter.join().unwrap();
    assert!(taken_at.duration_since(released_at) < Duration::from_secs(2));
    unlocked.unwrap();

    // The other waiter polls, and takes the lock soon after its release.
    let released_at = Instant::now();
    dropped.unlock().unwrap();
    let (taken_at, unlocked) = dropped_waiter.join().unwrap();
    assert!(taken_at.duration_since(released_at) < Duration::from_secs(2));
    // Its release may not announce itself on the channel, but Redis kept what the script
    // wrote before the refused PUBLISH: the lock is free.
    assert!(
        matches!(
            &unlocked,
            Err(Error::PermissionDenied {
                permission: Permission::Channel(_),
                ..
            })
        ),
        "{unlocked:?}"
    );
    assert!(server
        .command(&["EXISTS", "acl:dropped"])
        .unwrap()
        .starts_with(":0"));
}

/// A user without `INFO` keeps the server check from reading the settings: it says what it
/// could not read, a strict build refuses, and the guide's user (with `+info`) passes.
#[test]
fn the_server_check_says_what_the_user_may_not_read() {
    let (server, url) = server_with_user();
    let manager = LockManager::builder(url.as_str())
        .server_check(ServerCheck::Strict)
        .build()
        .expect("the guide's user may read what the check needs");
    assert!(manager.check_server().unwrap().is_empty());
    let blind = create_user(&server, "no-info", |rule| rule != "+info", &[]);
    let manager = build(&blind).expect("a warning, not a refusal");
    let findings = manager.check_server().unwrap();
    assert!(
        findings.iter().any(|finding| matches!(
            finding,
            Finding::Unreadable { command, answer, .. }
                if command == "INFO memory" && answer.contains("NOPERM")
        )),
        "{findings:?}"
    );
    let strict = LockManager::builder(blind.as_str())
        .server_check(ServerCheck::Strict)
        .build();
    assert!(
        matches!(strict, Err(Error::UnsafeServer { .. })),
        "{strict:?}"
    );
}

/// On a master with a replica, the guide's user waits for it by default (and a key outside
/// its keys is refused as typed as without acknowledgements); a user without `WAIT` is told
/// which command it lacks (and nothing is held), and a user without `INFO` cannot count the
/// replicas, so its writes wait for none.
#[test]
fn on_a_master_with_a_replica_the_user_needs_wait_and_info_for_the_default_acks() {
    let (master, _replica) =
        RedisServer::start_with_replica().expect("a redis-server master and replica");
    let guide = create_user(&master, "guide", |_| true, &[]);
    let manager = LockManager::builder(guide.as_str()).build().unwrap();
    let guard = manager.lock("acl:acks").lock().unwrap();
    assert_eq!(guard.replicas_acknowledged(), Some(1));
    guard.unlock().unwrap();
    // A refusal read behind which a WAIT was sent is as typed as one without.
    match manager.lock("outside:acks").try_lock() {
        Err(Error::PermissionDenied {
            permission: Permission::Key(_),
            ..
        }) => {}
        other => panic!("expected the key refused: {other:?}"),
    }

    let no_wait = create_user(&master, "no-wait", |rule| rule != "+wait", &[]);
    let manager = LockManager::builder(no_wait.as_str()).build().unwrap();
    match manager.lock("acl:acks").try_lock() {
        Err(Error::PermissionDenied {
            permission: Permission::Command(command),
            ..
        }) if command.eq_ignore_ascii_case("wait") => {}
        other => panic!("expected WAIT refused: {other:?}"),
    }
    assert!(!manager.lock("acl:acks").is_locked().unwrap());

    let no_info = create_user(&master, "no-info-acks", |rule| rule != "+info", &[]);
    let manager = LockManager::builder(no_info.as_str()).build().unwrap();
    let guard = manager.lock("acl:acks").lock().unwrap();
    assert_eq!(guard.replicas_acknowledged(), None);
    guard.unlock().unwrap();
}
