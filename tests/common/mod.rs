//! Shared test helpers: throwaway servers, managers with short timeouts, condition waits and
//! child processes.
#![allow(dead_code)]

pub mod redisson;
pub mod semaphores;
#[allow(unused_imports)] // its re-exports, for the binaries whose tests use them
pub mod sentinel;

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use redlease::{LockManager, LostLock};
pub use redlease_testing::RedisServer;

/// Environment variable that turns a test binary run into a child worker.
pub const CHILD_ROLE: &str = "REDLEASE_TEST_CHILD_ROLE";

pub fn server() -> RedisServer {
    RedisServer::start().expect("start redis-server (install it: apt-get install redis-server)")
}

/// How long the managers of these helpers ride out an outage: short, so that tests of a
/// stopped Redis end soon (tests of riding one out set their own).
pub const OUTAGE_GRACE: Duration = Duration::from_secs(1);

/// A manager with a 1 s response timeout, the given watchdog timeout and a 1 s outage grace.
pub fn manager(server: &RedisServer, watchdog: Duration) -> LockManager {
    manager_for_url(&server.url(), watchdog)
}

pub fn manager_for_url(url: &str, watchdog: Duration) -> LockManager {
    LockManager::builder(url)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(watchdog)
        .outage_grace(OUTAGE_GRACE)
        .build()
        .expect("build manager")
}

/// Like [`manager`], with a lost-lock callback that sends every report, and when it came,
/// to the returned receiver.
pub fn reporting_manager(
    server: &RedisServer,
    watchdog: Duration,
) -> (LockManager, Receiver<(LostLock, Instant)>) {
    let (report, reports) = crossbeam_channel::unbounded();
    let manager = LockManager::builder(server.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(watchdog)
        .outage_grace(OUTAGE_GRACE)
        .on_lost_lock(move |lost| {
            let _ = report.send((lost.clone(), Instant::now()));
        })
        .build()
        .expect("build manager");
    (manager, reports)
}

pub use redlease_testing::eventually;

/// A plain connection to `server` (connected within 2 s), for a hand-written client or a
/// check of what the server holds.
pub fn connection(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
        .expect("plain connection")
}

/// How long a child process may run before a test gives up on it.
pub const CHILD_DEADLINE: Duration = Duration::from_secs(60);

/// Re-runs this test binary as a child that executes only `test_name`, with `role` in
/// [`CHILD_ROLE`] and the given extra environment; its stdout is piped to the parent.
///
/// Child entry points are `#[ignore]`d tests, so that a plain test run lists them as ignored
/// instead of counting them as passed; the child runs its one entry with `--ignored`.
pub fn spawn_child(test_name: &str, role: &str, env: &[(&str, String)]) -> KillOnDrop {
    let mut command = child_command(test_name, role, env);
    command.stdout(Stdio::piped());
    KillOnDrop::spawn(&mut command)
}

/// The command that runs the ignored test `test_name` of this binary as a `role` child.
fn child_command(test_name: &str, role: &str, env: &[(&str, String)]) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("test binary path"));
    command
        .args(child_test_args(test_name))
        .env(CHILD_ROLE, role)
        .stdin(Stdio::piped())
        .stderr(Stdio::inherit());
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

/// The test binary arguments that run exactly the ignored test `test_name` (its full name:
/// in the suite, with its module, `latch::counting_process`), printing as it goes.
pub fn child_test_args(test_name: &str) -> [&str; 6] {
    [
        test_name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ]
}

/// Runs `count` children of `test_name` in `role` at once and waits until every one has
/// ended successfully.
pub fn run_children(count: usize, test_name: &str, role: &str, env: &[(&str, String)]) {
    let mut children: Vec<KillOnDrop> = (0..count)
        .map(|_| {
            // Nothing is read from these children: what they print would only fill the pipe.
            let mut command = child_command(test_name, role, env);
            command.stdout(Stdio::null());
            KillOnDrop::spawn(&mut command)
        })
        .collect();
    for child in &mut children {
        let status = child.wait_within(CHILD_DEADLINE);
        assert!(status.success(), "a {role} child failed");
    }
}

/// A child process that is killed, if still running, and reaped when dropped: a test that
/// fails (or panics) while a child runs leaves no process behind, a stopped one included
/// (`SIGKILL` ends a process stopped with `SIGSTOP` too).
pub struct KillOnDrop(Child);

impl KillOnDrop {
    pub fn spawn(command: &mut Command) -> Self {
        KillOnDrop(command.spawn().expect("spawn child test process"))
    }

    /// Waits for the child to end and answers its status; fails the test when it runs
    /// longer than `within` (the drop then kills it).
    pub fn wait_within(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.0.try_wait().expect("wait for child") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "child {} still runs after {within:?}",
                self.0.id()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// The role of this process when it runs as a child, if it does.
pub fn child_role() -> Option<String> {
    std::env::var(CHILD_ROLE).ok()
}

pub fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("child needs {key}"))
}

/// The release channels anyone is subscribed to on the server (`PUBSUB CHANNELS`), as raw
/// text: `*0\r\n` when there are none. (Every manager also listens to one notice channel
/// for as long as it runs; that one is not a release channel.)
pub fn release_channels(server: &RedisServer) -> String {
    server
        .command(&["PUBSUB", "CHANNELS", "redisson_lock__channel*"])
        .expect("PUBSUB CHANNELS")
}

/// How many release receipts (`redisson_unlock_latch:*` keys) `redis` keeps now.
pub fn receipts_left(redis: &RedisServer) -> u64 {
    redis
        .command(&[
            "EVAL",
            "return #redis.call('keys', 'redisson_unlock_latch:*')",
            "0",
        ])
        .unwrap()
        .trim_start_matches(':')
        .trim()
        .parse()
        .unwrap()
}

/// Asserts that `manager` left nothing behind: no watchdog entry, no subscription of its own
/// and none on the server.
pub fn assert_nothing_left(manager: &LockManager, server: &RedisServer) {
    assert_eq!(manager.watched_locks(), 0, "a watchdog entry was left");
    assert!(
        eventually(Duration::from_secs(5), || manager.subscribed_channels()
            == 0),
        "a subscription was left: {}",
        manager.subscribed_channels()
    );
    assert!(
        eventually(Duration::from_secs(5), || release_channels(server)
            .starts_with("*0")),
        "a release channel is still subscribed: {}",
        release_channels(server)
    );
}

/// Reads the child's stdout until a line containing `marker` (libtest prints its own lines
/// first); answers the reader, to keep the pipe open while the child lives.
pub fn wait_for_line(child: &mut Child, marker: &str) -> BufReader<ChildStdout> {
    let mut reader = BufReader::new(child.stdout.take().expect("child stdout is piped"));
    line_with(&mut reader, marker);
    reader
}

/// Reads lines until one contains `marker`; answers the text after the marker, trimmed.
pub fn line_with(reader: &mut impl BufRead, marker: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader.read_line(&mut line).expect("read child stdout");
        assert!(read > 0, "child ended before saying {marker:?}");
        if let Some(at) = line.find(marker) {
            return line[at + marker.len()..].trim().to_owned();
        }
    }
}

/// Sends `signal` (`libc::SIGSTOP`, `libc::SIGCONT`...) to a child process.
pub fn signal(child: &Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    // SAFETY: kill(2) on the pid of our own child, which has not been waited for.
    assert_eq!(
        unsafe { libc::kill(pid, signal) },
        0,
        "kill({pid}, {signal})"
    );
}

/// The host's monotonic clock in ns, the same in every process.
pub fn now_ns() -> u64 {
    redlease_testing::now_ns()
}

/// A small seeded generator (xorshift), so that a run can be repeated.
pub struct Random(pub u64);

impl Random {
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound.max(1)
    }

    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

/// The name of an error's variant (`Timeout`, `Unreachable`, ...), for counting errors by kind.
pub fn error_name(err: &redlease::Error) -> String {
    let text = format!("{err:?}");
    text.split(['(', ' ', '{'])
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The file a child process of a multi-process test writes its events to.
pub fn events_path(dir: &std::path::Path, index: usize) -> std::path::PathBuf {
    dir.join(format!("events-{index}"))
}

/// A `try_lock` of `name` on another thread, sent now (while its master is frozen, in the
/// demoted-master tests): its answer comes back on `answer`; the thread keeps the guard, as
/// its holder would, until the call is dropped.
pub struct BlockedTry {
    answer: std::sync::mpsc::Receiver<Result<bool, String>>,
    release: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl BlockedTry {
    pub fn start(manager: &LockManager, name: &str) -> BlockedTry {
        let (answered, answer) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let manager = manager.clone();
        let name = name.to_owned();
        let thread = std::thread::spawn(move || {
            let guard = manager.lock(&name).try_lock();
            let outcome = guard
                .as_ref()
                .map(Option::is_some)
                .map_err(|e| e.to_string());
            let _ = answered.send(outcome);
            let _ = released.recv();
        });
        BlockedTry {
            answer,
            release,
            thread,
        }
    }

    /// Whether the call was granted the lock (`Err` with its error's text).
    pub fn answered(&self, within: Duration) -> Result<bool, String> {
        self.answer
            .recv_timeout(within)
            .expect("the blocked call answered")
    }

    /// Drops the guard and joins the thread.
    pub fn finish(self) {
        drop(self.release);
        self.thread.join().expect("blocked thread");
    }
}

/// After a failover, with `answered` what the call blocked on the old master got for
/// `blocked`: a grant it got is not granted to `other` too, and of `manager` and `other`
/// taking `fresh` now, only `manager` (the first) gets it: its guard, for the caller to
/// look where the lock is while it is held.
pub fn assert_no_second_holder(
    manager: &LockManager,
    other: &LockManager,
    answered: &Result<bool, String>,
    blocked: &str,
    fresh: &str,
) -> redlease::LockGuard {
    println!("the call blocked on the old master answered {answered:?}");
    if let Ok(true) = answered {
        let again = other.lock(blocked).try_lock().expect("try_lock");
        assert!(again.is_none(), "a lock granted by the demoted master");
    }
    let first = manager.lock(fresh).try_lock().expect("try_lock");
    let second = other.lock(fresh).try_lock().expect("try_lock");
    assert!(
        !(first.is_some() && second.is_some()),
        "two managers hold the same lock: one on the demoted master"
    );
    first.expect("the lock was free")
}
