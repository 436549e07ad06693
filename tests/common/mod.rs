//! Shared test helpers: throwaway servers, managers with short timeouts, condition waits and
//! child processes.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
pub use redlease::testing::RedisServer;
use redlease::{LockManager, LostLock};

/// Environment variable that turns a test binary run into a child worker.
pub const CHILD_ROLE: &str = "REDLEASE_TEST_CHILD_ROLE";

pub fn server() -> RedisServer {
    RedisServer::start().expect("start redis-server (install it: apt-get install redis-server)")
}

/// A manager with a 1 s response timeout and the given watchdog timeout.
pub fn manager(server: &RedisServer, watchdog: Duration) -> LockManager {
    manager_for_url(&server.url(), watchdog)
}

pub fn manager_for_url(url: &str, watchdog: Duration) -> LockManager {
    LockManager::builder(url)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(watchdog)
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
        .on_lost_lock(move |lost| {
            let _ = report.send((lost.clone(), Instant::now()));
        })
        .build()
        .expect("build manager");
    (manager, reports)
}

/// Polls `condition` until it holds or `within` passes; answers whether it held.
pub fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Re-runs this test binary as a child that executes only `test_name`, with `role` in
/// [`CHILD_ROLE`] and the given extra environment.
pub fn spawn_child(test_name: &str, role: &str, env: &[(&str, String)]) -> Child {
    let mut command = Command::new(std::env::current_exe().expect("test binary path"));
    command
        .args([test_name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ROLE, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (key, value) in env {
        command.env(key, value);
    }
    command.spawn().expect("spawn child test process")
}

/// Runs `count` children of `test_name` in `role` at once and waits until every one has
/// ended successfully.
pub fn run_children(count: usize, test_name: &str, role: &str, env: &[(&str, String)]) {
    let children: Vec<Child> = (0..count)
        .map(|_| spawn_child(test_name, role, env))
        .collect();
    for child in children {
        let output = child.wait_with_output().expect("wait for child");
        assert!(output.status.success(), "a {role} child failed");
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
