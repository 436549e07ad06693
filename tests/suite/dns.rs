//! Host name lookups against a real DNS server that never answers: connecting stays within
//! the connect timeout, and the addresses of the last good lookup keep serving.
//!
//! The test re-runs this binary under `unshare --mount`, and the child bind-mounts its own
//! `/etc/resolv.conf` (pointing at the silent server) and `/etc/hosts` over the system ones,
//! visible to the child only. It needs root for the mounts and for port 53; without root or
//! `unshare` it is skipped with a printed reason.

use crate::common;

use std::io::Read;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{child_role, child_test_args, env, KillOnDrop, CHILD_ROLE};
use redlease::{Error, LockManager};
use redlease_testing::RedisServer;

/// A name that only the child's own hosts file may know.
const TEST_NAME: &str = "redlease-silent-dns.test";
/// The silent DNS server, on a loopback address of its own.
const SILENT_SERVER: &str = "127.53.53.53:53";
/// With `timeout:5 attempts:1`, a lookup of an unknown name takes 5 s against that server.
const RESOLV_CONF: &str = "nameserver 127.53.53.53\noptions timeout:5 attempts:1\n";
const HOSTS_WITHOUT_NAME: &str = "127.0.0.1 localhost\n::1 localhost\n";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A generous bound for "did not hang on the lookup" with a 1 s connect timeout.
const NO_HANG: Duration = Duration::from_millis(2500);
/// Longer than the resolver trusts cached addresses without a fresh lookup (5 s).
const PAST_CACHE_TRUST: Duration = Duration::from_millis(5500);
/// The whole child run, with room to spare.
const CHILD_DEADLINE: Duration = Duration::from_secs(60);

const ROLE: &str = "silent_dns";
const DIR_VAR: &str = "REDLEASE_TEST_DNS_DIR";
const PARENT_NAMESPACE_VAR: &str = "REDLEASE_TEST_PARENT_MOUNT_NS";

#[test]
fn lookups_against_a_silent_dns_server_stay_within_the_connect_timeout() {
    if child_role().is_some() {
        return;
    }
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: needs root to bind-mount /etc/resolv.conf and to bind port 53");
        return;
    }
    let Some(unshare) = find_in_path("unshare") else {
        println!("skipped: `unshare` (util-linux) is not installed");
        return;
    };

    // The server's address is fixed: another run of this test at the same time (the test
    // script runs its Redis and Valkey passes side by side) waits until this one is done.
    let _one_at_a_time = exclusive_use_of(SILENT_SERVER);
    let queries = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let server = silent_dns_server(Arc::clone(&queries), Arc::clone(&stop));

    let dir = TempDir::new();
    std::fs::write(dir.0.join("resolv.conf"), RESOLV_CONF).unwrap();
    std::fs::write(dir.0.join("hosts"), HOSTS_WITHOUT_NAME).unwrap();
    let mut command = Command::new(unshare);
    command
        .arg("--mount")
        .arg(std::env::current_exe().expect("test binary path"))
        .args(child_test_args("dns::silent_dns_child"))
        .env(CHILD_ROLE, ROLE)
        .env(DIR_VAR, &dir.0)
        .env(PARENT_NAMESPACE_VAR, mount_namespace())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (status, output) = run_to_end(KillOnDrop::spawn(&mut command), CHILD_DEADLINE);
    stop.store(true, Ordering::Release);
    server.join().unwrap();
    assert!(status.success(), "the child failed ({status}):\n{output}");
    println!("{output}");
    assert!(
        queries.load(Ordering::Relaxed) > 0,
        "the silent server saw no query: the lookups did not go to it"
    );
}

/// Child side of the test above, in a mount namespace of its own.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn silent_dns_child() {
    if child_role().as_deref() != Some(ROLE) {
        return;
    }
    // The mounts below must never reach the system's own files.
    assert_ne!(
        mount_namespace(),
        env(PARENT_NAMESPACE_VAR),
        "not in a mount namespace of its own"
    );
    let dir = PathBuf::from(env(DIR_VAR));
    let hosts = dir.join("hosts");
    bind_mount(&dir.join("resolv.conf"), Path::new("/etc/resolv.conf"));
    bind_mount(&hosts, Path::new("/etc/hosts"));
    let redis = RedisServer::start().expect("start redis-server");
    let url = format!("redis://{TEST_NAME}:{}/", redis.port());
    let build = || {
        LockManager::builder(url.as_str())
            .connect_timeout(CONNECT_TIMEOUT)
            .response_timeout(Duration::from_secs(1))
            .build()
    };

    // 1. No cached addresses: the lookup hangs, the build gives up within its budget.
    let started = Instant::now();
    let outcome = build();
    let took = started.elapsed();
    println!("build with an unresolvable name: {outcome:?} after {took:?}");
    assert!(matches!(outcome, Err(Error::Timeout(_))), "{outcome:?}");
    assert!(took < NO_HANG, "the lookup held up the build: {took:?}");

    // 2. While the name resolves, a manager connects and caches its addresses.
    std::fs::write(
        &hosts,
        format!("{HOSTS_WITHOUT_NAME}127.0.0.1 {TEST_NAME}\n"),
    )
    .unwrap();
    let manager = build().expect("build while the name resolves");
    let lock = manager.lock("dns");
    lock.lock().unwrap().unlock().unwrap();

    // 3. The name is gone: new connections use the cached addresses, at first without a
    // lookup, and once the cache is due for a refresh, after waiting part of the budget on
    // the lookup that hangs.
    std::fs::write(&hosts, HOSTS_WITHOUT_NAME).unwrap();
    for (round, pause) in [Duration::ZERO, PAST_CACHE_TRUST].into_iter().enumerate() {
        std::thread::sleep(pause);
        let killed = redis
            .command(&["CLIENT", "KILL", "TYPE", "normal"])
            .unwrap();
        assert!(killed.starts_with(':'), "CLIENT KILL: {killed}");
        let started = Instant::now();
        let outcome = lock.lock().and_then(|guard| guard.unlock());
        let took = started.elapsed();
        println!("lock and unlock on a new connection, round {round}: {outcome:?} after {took:?}");
        assert!(outcome.is_ok(), "round {round}: {outcome:?}");
        assert!(
            took < NO_HANG,
            "round {round}: the lookup held it up: {took:?}"
        );
    }

    // 4. Those rounds owed their success to the cache: a manager without one still fails.
    let outcome = build();
    println!("a new manager now: {outcome:?}");
    assert!(matches!(outcome, Err(Error::Timeout(_))), "{outcome:?}");
    manager.shutdown();
}

/// A UDP socket on the DNS port that reads every query and answers none; counts them.
/// An exclusive lock on a file named after `address`, held by this process until the file is
/// dropped: the processes that use the address take turns.
fn exclusive_use_of(address: &str) -> std::fs::File {
    let name = format!("redlease-test-{}.lock", address.replace([':', '.'], "-"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join(name))
        .expect("open the lock file of the address");
    file.lock().expect("lock the address's lock file");
    file
}

fn silent_dns_server(
    queries: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let socket = UdpSocket::bind(SILENT_SERVER)
        .unwrap_or_else(|err| panic!("bind the silent DNS server on {SILENT_SERVER}: {err}"));
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    std::thread::spawn(move || {
        let mut query = [0u8; 512];
        while !stop.load(Ordering::Acquire) {
            if socket.recv_from(&mut query).is_ok() {
                queries.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

/// Waits for `child` to end, at most `deadline`, and answers its status and everything it
/// printed. A child that runs too long is killed and fails the test with its output so far.
fn run_to_end(mut child: KillOnDrop, deadline: Duration) -> (std::process::ExitStatus, String) {
    let stdout = read_all_in_background(child.stdout.take().unwrap());
    let stderr = read_all_in_background(child.stderr.take().unwrap());
    let give_up_at = Instant::now() + deadline;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= give_up_at {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(child);
    let output = format!(
        "--- child stdout ---\n{}--- child stderr ---\n{}",
        stdout.join().unwrap(),
        stderr.join().unwrap()
    );
    match status {
        Some(status) => (status, output),
        None => panic!("the child ran longer than {deadline:?} and was killed:\n{output}"),
    }
}

fn read_all_in_background(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// A private temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!("redlease-dns-{}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Which mount namespace this process is in, such as `mnt:[4026531841]`.
fn mount_namespace() -> String {
    std::fs::read_link("/proc/self/ns/mnt")
        .expect("read /proc/self/ns/mnt")
        .to_string_lossy()
        .into_owned()
}

/// Makes `target` show the contents of `source`, in this mount namespace only.
fn bind_mount(source: &Path, target: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let source_c = std::ffi::CString::new(source.as_os_str().as_bytes()).unwrap();
    let target_c = std::ffi::CString::new(target.as_os_str().as_bytes()).unwrap();
    // SAFETY: both paths are NUL-terminated strings that outlive the call; a bind mount
    // takes no file system type and no data.
    let mounted = unsafe {
        libc::mount(
            source_c.as_ptr(),
            target_c.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    assert_eq!(
        mounted,
        0,
        "bind-mount {} over {}: {}",
        source.display(),
        target.display(),
        std::io::Error::last_os_error()
    );
}
