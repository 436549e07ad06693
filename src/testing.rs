//! A throwaway `redis-server` process for examples, demos, doc tests and tests.
//!
//! [`RedisServer::start`] runs `redis-server` (from `PATH`, or the path in the
//! `REDLEASE_REDIS_SERVER` environment variable) on a free loopback port with persistence off
//! and a private working directory, and waits until it answers `PING`. The process can be
//! killed, paused (`SIGSTOP`), resumed and restarted on the same port, which is what fault
//! tests need; dropping the value kills it. [`RedisServer::start_with_replica`] starts a
//! master and a replica of it (`--replicaof`) at once, for replication tests. Unix only. Nothing else in the crate uses it, and
//! it is built only with the `testing` feature (off by default):
//!
//! ```toml
//! [dev-dependencies]
//! redlease = { version = "0.1", features = ["testing"] }
//! ```

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a fresh server may take to answer its first `PING`.
const STARTUP_DEADLINE: Duration = Duration::from_secs(10);

/// How long a fresh replica may take to finish its first synchronization with its master.
const SYNC_DEADLINE: Duration = Duration::from_secs(10);

static NEXT_SERVER: AtomicU64 = AtomicU64::new(0);

/// A `redis-server` child process on `127.0.0.1`, killed when dropped.
///
/// ```
/// let redis = redlease::testing::RedisServer::start().expect("redis-server on PATH");
/// let manager = redlease::LockManager::builder(redis.url()).build().unwrap();
/// assert!(!manager.lock("anything").is_locked().unwrap());
/// ```
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra_args: Vec<String>,
}

impl RedisServer {
    /// Starts a server with persistence off.
    pub fn start() -> io::Result<Self> {
        Self::start_with_args(&[])
    }

    /// Starts a server with extra `redis-server` arguments (such as `["--appendonly", "yes"]`).
    pub fn start_with_args(extra_args: &[&str]) -> io::Result<Self> {
        let mut server = RedisServer::unstarted(extra_args)?;
        let mut last_error = None;
        // A free port can be taken by someone else before the server binds it: try again.
        for _ in 0..5 {
            server.port = free_port()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(err) => last_error = Some(err),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    /// Starts a replica of `master` (`--replicaof 127.0.0.1 <its port>`), once it answers
    /// `PING`; its first synchronization may still be under way (see
    /// [`wait_for_master_link`](RedisServer::wait_for_master_link)).
    pub fn start_replica_of(master: &RedisServer) -> io::Result<Self> {
        Self::start_with_args(&["--replicaof", "127.0.0.1", &master.port.to_string()])
    }

    /// Starts a master and one replica of it at once, and answers them (master first) once
    /// the replica is synchronized (its link to the master is up) and acknowledges writes
    /// (a `WAIT` on the master hears from it).
    ///
    /// ```
    /// let (master, replica) = redlease::testing::RedisServer::start_with_replica()
    ///     .expect("redis-server on PATH");
    /// let info = replica.command(&["INFO", "replication"]).unwrap();
    /// assert!(info.contains(&format!("master_port:{}", master.port())), "{info}");
    /// assert!(info.contains("master_link_status:up"), "{info}");
    /// ```
    pub fn start_with_replica() -> io::Result<(Self, Self)> {
        let mut last_error = None;
        // A free port can be taken by someone else before the master binds it: try again.
        for _ in 0..5 {
            // Without the delay by which a master waits for more replicas to share a
            // diskless synchronization (5 s by default).
            let mut master = RedisServer::unstarted(&["--repl-diskless-sync-delay", "0"])?;
            master.port = free_port()?;
            let master_port = master.port.to_string();
            // The replica keeps trying to reach its master until the master answers, so
            // both start at the same time.
            let replica = std::thread::spawn(move || {
                Self::start_with_args(&["--replicaof", "127.0.0.1", &master_port])
            });
            let master_started = master.spawn();
            let replica = replica
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("replica start panicked")));
            match (master_started, replica) {
                (Ok(()), Ok(replica)) => {
                    replica.wait_for_master_link(SYNC_DEADLINE)?;
                    master.wait_for_replica_acks(1, SYNC_DEADLINE)?;
                    return Ok((master, replica));
                }
                (Err(err), _) | (_, Err(err)) => last_error = Some(err),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    /// Waits until this replica reports its link to its master up (`master_link_status:up`
    /// in `INFO replication`: the first synchronization is done), at most `within`.
    ///
    /// # Errors
    /// [`io::ErrorKind::TimedOut`] when the link is not up by then.
    pub fn wait_for_master_link(&self, within: Duration) -> io::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            let info = self.command(&["INFO", "replication"])?;
            if info.contains("master_link_status:up") {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("replica on port {} has no link to its master", self.port),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until `count` replicas acknowledge a write on this master, at most `within`:
    /// a `PUBLISH` to a channel nobody listens to (a write replicas get, which leaves no
    /// key), then `WAIT count 100` on the same connection, until it answers `count`. A
    /// replica reports its link up, and the master lists it online, a moment before it
    /// acknowledges anything.
    ///
    /// # Errors
    /// [`io::ErrorKind::TimedOut`] when fewer acknowledge by then.
    pub fn wait_for_replica_acks(&self, count: usize, within: Duration) -> io::Result<()> {
        let deadline = Instant::now() + within;
        let publish = ["PUBLISH", "redlease-testing:replica-probe", "ack?"];
        let count_text = count.to_string();
        let wait = ["WAIT", count_text.as_str(), "100"];
        loop {
            let replies = self.exchange(&[&publish, &wait])?;
            let acknowledged = replies
                .get(1)
                .and_then(|reply| reply.strip_prefix(':'))
                .and_then(|number| number.parse::<usize>().ok());
            if acknowledged.is_some_and(|acknowledged| acknowledged >= count) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "master on port {}: fewer than {count} replicas acknowledge ({replies:?})",
                        self.port
                    ),
                ));
            }
        }
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id of the running server, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server with `SIGKILL` and waits for it to exit.
    pub fn kill(&mut self) -> io::Result<()> {
        if let Some(mut child) = self.child.take() {
            let _ = self.signal_child(&child, libc::SIGCONT);
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Freezes the server with `SIGSTOP`: connections stay open and nothing answers.
    pub fn pause(&self) -> io::Result<()> {
        self.signal(libc::SIGSTOP)
    }

    /// Lets a paused server go on (`SIGCONT`).
    pub fn resume(&self) -> io::Result<()> {
        self.signal(libc::SIGCONT)
    }

    /// Kills the server if it runs and starts a new one on the same port, with the same
    /// arguments; without persistence it starts empty.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill()?;
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            match self.spawn() {
                Ok(()) => return Ok(()),
                // The old socket may linger a moment.
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Sends one command (as words) and answers the raw reply, for checks in tests.
    pub fn command(&self, words: &[&str]) -> io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(STARTUP_DEADLINE))?;
        let mut request = format!("*{}\r\n", words.len());
        for word in words {
            request.push_str(&format!("${}\r\n{word}\r\n", word.len()));
        }
        stream.write_all(request.as_bytes())?;
        let mut reply = vec![0u8; 64 * 1024];
        let read = stream.read(&mut reply)?;
        Ok(String::from_utf8_lossy(&reply[..read]).into_owned())
    }

    /// A server not started yet, with its private directory made.
    fn unstarted(extra_args: &[&str]) -> io::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "redlease-redis-{}-{}",
            std::process::id(),
            NEXT_SERVER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(RedisServer {
            child: None,
            port: 0,
            dir,
            extra_args: extra_args.iter().map(|arg| arg.to_string()).collect(),
        })
    }

    /// Sends `commands` (each as words) on one connection at once and answers their replies,
    /// one line each: only for commands that answer one line (a status, an error, a number).
    fn exchange(&self, commands: &[&[&str]]) -> io::Result<Vec<String>> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(STARTUP_DEADLINE))?;
        let mut request = String::new();
        for words in commands {
            request.push_str(&format!("*{}\r\n", words.len()));
            for word in *words {
                request.push_str(&format!("${}\r\n{word}\r\n", word.len()));
            }
        }
        stream.write_all(request.as_bytes())?;
        let mut received = Vec::new();
        let mut buffer = [0u8; 512];
        while received.windows(2).filter(|pair| pair == b"\r\n").count() < commands.len() {
            let read = stream.read(&mut buffer)?;
            if read == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            received.extend_from_slice(&buffer[..read]);
        }
        Ok(String::from_utf8_lossy(&received)
            .split("\r\n")
            .filter(|line| !line.is_empty())
            .map(str::to_owned)
            .collect())
    }

    fn spawn(&mut self) -> io::Result<()> {
        let program =
            std::env::var_os("REDLEASE_REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
        let port = self.port.to_string();
        let mut child = Command::new(&program)
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args([
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|err| {
                io::Error::new(
                    err.kind(),
                    format!("cannot run {program:?} (install redis-server): {err}"),
                )
            })?;
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!("redis-server exited: {status}")));
            }
            if self.answers_ping() {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "redis-server did not answer PING",
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn answers_ping(&self) -> bool {
        self.command(&["PING"])
            .is_ok_and(|reply| reply.starts_with("+PONG"))
    }

    fn signal(&self, signal: libc::c_int) -> io::Result<()> {
        match &self.child {
            Some(child) => self.signal_child(child, signal),
            None => Err(io::Error::other("redis-server is not running")),
        }
    }

    fn signal_child(&self, child: &Child, signal: libc::c_int) -> io::Result<()> {
        let pid = libc::pid_t::try_from(child.id()).map_err(io::Error::other)?;
        // SAFETY: kill(2) on the pid of our own child, which we have not waited for yet.
        if unsafe { libc::kill(pid, signal) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Redis to run a demo on: `url` when one is given, else a throwaway server (returned
/// too, to keep it running).
///
/// ```no_run
/// let (url, _server) = redlease::testing::url_or_throwaway(std::env::args().nth(1))?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn url_or_throwaway(url: Option<String>) -> io::Result<(String, Option<RedisServer>)> {
    match url {
        Some(url) => Ok((url, None)),
        None => {
            let server = RedisServer::start()?;
            println!("started a throwaway redis-server at {}", server.url());
            Ok((server.url(), Some(server)))
        }
    }
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
