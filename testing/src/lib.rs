//! Throwaway Redis deployments for `redlease`'s tests, examples, benches and doc tests: a
//! `redis-server` process, a master with a replica, a whole Redis Cluster, TLS certificates,
//! and a proxy that cuts connections. Its own crate of the workspace, so the published
//! `redlease` carries none of it.
//!
//! [`RedisServer::start`] runs `redis-server` (from `PATH`, or the path in the
//! `REDLEASE_REDIS_SERVER` environment variable) on a free loopback port with persistence off
//! and a private working directory, and waits until it answers `PING` (as its own process:
//! a port someone else took is never mistaken for it). The process can be killed, paused
//! (`SIGSTOP`), resumed and restarted on the same port, which is what fault tests need;
//! dropping the value kills it. [`RedisServer::start_with_replica`] starts a master and a
//! replica of it (`--replicaof`) at once, for replication tests. [`CuttingProxy`] stands
//! between a client and such a server, and cuts a connection after a request it names
//! reached the server, before its answer came back. [`RedisCluster::start`] runs a whole
//! Redis Cluster of such servers (masters, replicas, `redis-cli --cluster create`), whose
//! masters can be killed and whose slots can be moved step by step. Unix only.
//!
//! With the `tls` feature (on by default), [`TlsFiles::generate`] makes a throwaway CA and
//! certificates with the `openssl` command, and [`RedisServer::start_tls`] runs a TLS-only
//! server (`--port 0 --tls-port <port>`) with them (`redis-server` must be built with TLS, as
//! Debian's is).
#![cfg(unix)]
// The links to the TLS helpers, which only the `tls` feature has.
#![cfg_attr(not(feature = "tls"), allow(rustdoc::broken_intra_doc_links))]
#![warn(missing_docs)]

mod proxy;
pub mod sentinel;

pub use proxy::{CuttingProxy, Held};

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a fresh server may take to answer its first `PING`.
const STARTUP_DEADLINE: Duration = Duration::from_secs(10);

/// How long a fresh replica may take to finish its first synchronization with its master.
const SYNC_DEADLINE: Duration = Duration::from_secs(10);

static NEXT_SERVER: AtomicU64 = AtomicU64::new(0);

/// A `redis-server` child process on `127.0.0.1`, killed when dropped.
///
/// ```
/// let redis = redlease_testing::RedisServer::start().expect("redis-server on PATH");
/// let manager = redlease::LockManager::builder(redis.url()).build().unwrap();
/// assert!(!manager.lock("anything").is_locked().unwrap());
/// ```
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra_args: Vec<String>,
    /// The server program, when not the default one (see [`server_program`]).
    program: Option<std::ffi::OsString>,
    /// For a TLS-only server: how it is set up and how to talk to it.
    #[cfg(feature = "tls")]
    tls: Option<ServerTls>,
}

impl RedisServer {
    /// Starts a server with persistence off.
    pub fn start() -> io::Result<Self> {
        Self::start_with_args(&[])
    }

    /// Starts a server with extra `redis-server` arguments (such as `["--appendonly", "yes"]`).
    pub fn start_with_args(extra_args: &[&str]) -> io::Result<Self> {
        RedisServer::unstarted(extra_args)?.start_on_a_free_port()
    }

    /// Starts a server of `program` (another build than the default one, see
    /// [`server_program`]) with extra arguments.
    pub fn start_program(program: &std::ffi::OsStr, extra_args: &[&str]) -> io::Result<Self> {
        let mut server = RedisServer::unstarted(extra_args)?;
        server.program = Some(program.to_owned());
        server.start_on_a_free_port()
    }

    fn start_on_a_free_port(self) -> io::Result<Self> {
        self.start_on(free_port)
    }

    /// Starts the server on a port that `choose_port` answers.
    fn start_on(mut self, choose_port: fn() -> io::Result<u16>) -> io::Result<Self> {
        let server = &mut self;
        let mut last_error = None;
        // A free port can be taken by someone else before the server binds it: try again.
        for _ in 0..5 {
            server.port = choose_port()?;
            match server.spawn() {
                Ok(()) => return Ok(self),
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
    /// let (master, replica) = redlease_testing::RedisServer::start_with_replica()
    ///     .expect("redis-server on PATH");
    /// let info = replica.command(&["INFO", "replication"]).unwrap();
    /// assert!(info.contains(&format!("master_port:{}", master.port())), "{info}");
    /// assert!(info.contains("master_link_status:up"), "{info}");
    /// ```
    pub fn start_with_replica() -> io::Result<(Self, Self)> {
        Self::start_pair(None, &[])
    }

    /// [`start_with_replica`](RedisServer::start_with_replica) with `program` (the default
    /// one when `None`), both servers with `extra_args`.
    fn start_pair(
        program: Option<std::ffi::OsString>,
        extra_args: &[&str],
    ) -> io::Result<(Self, Self)> {
        let mut last_error = None;
        // A free port can be taken by someone else before the master binds it: try again.
        for _ in 0..5 {
            // Without the delay by which a master waits for more replicas to share a
            // diskless synchronization (5 s by default).
            let mut master_args = vec!["--repl-diskless-sync-delay", "0"];
            master_args.extend_from_slice(extra_args);
            let mut master = RedisServer::unstarted(&master_args)?;
            master.program.clone_from(&program);
            master.port = free_port()?;
            let master_port = master.port.to_string();
            let mut replica = RedisServer::unstarted(extra_args)?;
            replica.program.clone_from(&program);
            replica
                .extra_args
                .extend(["--replicaof", "127.0.0.1", &master_port].map(str::to_owned));
            // The replica keeps trying to reach its master until the master answers, so
            // both start at the same time.
            let replica = std::thread::spawn(move || replica.start_on_a_free_port());
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

    /// `redis://127.0.0.1:<port>/`; for a TLS-only server, `rediss://localhost:<port>/` (a
    /// host name, which its certificate is checked against).
    pub fn url(&self) -> String {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return format!("rediss://localhost:{}/", self.port);
        }
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
    ///
    /// # Errors
    /// [`io::ErrorKind::AddrInUse`] when another process took the port meanwhile.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill()?;
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            match self.spawn() {
                Ok(()) => return Ok(()),
                // The old socket may linger a moment; a port someone else took stays taken.
                Err(err) if err.kind() != io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Sends one command (as words) and answers the raw reply, for checks in tests (over TLS,
    /// with the test CA and client certificate, for a TLS-only server).
    pub fn command(&self, words: &[&str]) -> io::Result<String> {
        let mut request = format!("*{}\r\n", words.len());
        for word in words {
            request.push_str(&format!("${}\r\n{word}\r\n", word.len()));
        }
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(STARTUP_DEADLINE))?;
        stream.set_write_timeout(Some(STARTUP_DEADLINE))?;
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            return exchange(&mut tls.stream(stream)?, request.as_bytes());
        }
        exchange(&mut stream, request.as_bytes())
    }

    /// Sends one command (as words) and reads its whole reply, parsed (over TLS for a
    /// TLS-only server, as [`command`](Self::command)).
    fn call(&self, words: &[&str]) -> io::Result<Reply> {
        let request = request_of(words);
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let stream = TcpStream::connect(("127.0.0.1", self.port))?;
            stream.set_read_timeout(Some(STARTUP_DEADLINE))?;
            stream.set_write_timeout(Some(STARTUP_DEADLINE))?;
            let mut stream = tls.stream(stream)?;
            stream.write_all(request.as_bytes())?;
            return read_reply(&mut io::BufReader::new(stream));
        }
        call_plain(self.port, &request)
    }

    /// Like [`call`](Self::call), for a reply of text (a status or a bulk string); an error
    /// reply is an [`io::Error`] that names the command.
    fn call_text(&self, words: &[&str]) -> io::Result<String> {
        match self.call(words)? {
            Reply::Status(text) | Reply::Bulk(Some(text)) => Ok(text),
            other => Err(unexpected(self.port, words, &other)),
        }
    }

    /// Like [`call`](Self::call), for a command that answers `OK`.
    fn call_ok(&self, words: &[&str]) -> io::Result<()> {
        match self.call(words)? {
            Reply::Status(status) if status == "OK" => Ok(()),
            other => Err(unexpected(self.port, words, &other)),
        }
    }

    /// This node's view of its cluster (`CLUSTER NODES`), one line per node.
    fn cluster_view(&self) -> io::Result<Vec<NodeLine>> {
        let text = self.call_text(&["CLUSTER", "NODES"])?;
        text.lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                NodeLine::parse(line).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("port {}: CLUSTER NODES line {line:?}", self.port),
                    )
                })
            })
            .collect()
    }

    /// At most `count` keys of `slot` on this node (`CLUSTER GETKEYSINSLOT`).
    fn keys_in_slot(&self, slot: u16, count: usize) -> io::Result<Vec<String>> {
        let slot = slot.to_string();
        let count = count.min(i64::MAX as usize).to_string();
        let words = ["CLUSTER", "GETKEYSINSLOT", slot.as_str(), count.as_str()];
        match self.call(&words)? {
            Reply::Array(Some(keys)) => keys
                .into_iter()
                .map(|key| match key {
                    Reply::Bulk(Some(key)) => Ok(key),
                    other => Err(unexpected(self.port, &words, &other)),
                })
                .collect(),
            other => Err(unexpected(self.port, &words, &other)),
        }
    }

    /// A server not started yet, with its private directory made.
    fn unstarted(extra_args: &[&str]) -> io::Result<Self> {
        Ok(RedisServer {
            child: None,
            port: 0,
            dir: private_dir("redis")?,
            extra_args: extra_args.iter().map(|arg| arg.to_string()).collect(),
            program: None,
            #[cfg(feature = "tls")]
            tls: None,
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
        let program = self.program.clone().unwrap_or_else(server_program);
        let mut child = Command::new(&program)
            .args(self.listening_arguments())
            .args(["--bind", "127.0.0.1", "--save", ""])
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
            // A port taken between our choice and the server's bind answers too, from someone
            // else's server (ours then exits): only our own process will do.
            let exited = child.try_wait()?;
            let failed = match (exited, self.who_answers(&child)) {
                (None, Answerer::Us) => {
                    self.child = Some(child);
                    return Ok(());
                }
                (Some(_), Answerer::Us | Answerer::Someone) => Some(self.taken()),
                (Some(status), Answerer::Nobody) => {
                    Some(io::Error::other(format!("redis-server exited: {status}")))
                }
                // Ours is still starting, or about to find the port taken.
                (None, Answerer::Someone) if Instant::now() >= deadline => Some(self.taken()),
                (None, _) if Instant::now() >= deadline => Some(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "redis-server did not answer PING",
                )),
                (None, _) => None,
            };
            if let Some(err) = failed {
                let _ = child.kill();
                let _ = child.wait();
                return Err(err);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Who answers `PING` on this port: our `child` (or a process it started: a wrapper
    /// script), someone else's server, or nobody. A server whose `INFO` names no process id
    /// is taken for ours, as nothing tells otherwise.
    fn who_answers(&self, child: &Child) -> Answerer {
        if !self.answers_ping() {
            return Answerer::Nobody;
        }
        match self.process_id() {
            Some(pid) if !descends_from(pid, child.id()) => Answerer::Someone,
            _ => Answerer::Us,
        }
    }

    /// The error of a start whose port another process holds.
    fn taken(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("port {} answers for another process", self.port),
        )
    }

    /// Where the server listens: the plaintext port, or for TLS only the TLS port.
    fn listening_arguments(&self) -> Vec<String> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            return tls.arguments(self.port);
        }
        vec!["--port".to_owned(), self.port.to_string()]
    }

    fn answers_ping(&self) -> bool {
        self.command(&["PING"])
            .is_ok_and(|reply| reply.starts_with("+PONG"))
    }

    /// The process id of the server that answers on this port (`process_id` in `INFO server`).
    fn process_id(&self) -> Option<u32> {
        let info = self.call_text(&["INFO", "server"]).ok()?;
        info.lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .and_then(|id| id.trim().parse().ok())
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
/// let (url, _server) = redlease_testing::url_or_throwaway(std::env::args().nth(1))?;
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

/// Who answers on a server's port.
enum Answerer {
    Us,
    Someone,
    Nobody,
}

/// Whether process `pid` is `ancestor` or one of its descendants (a few generations, by the
/// parent ids in `/proc`; without `/proc`, only `pid == ancestor` tells).
fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut current = pid;
    for _ in 0..8 {
        if current == ancestor {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{current}/stat")) else {
            return false;
        };
        // `pid (comm) state ppid ...`: the command may hold spaces and parentheses.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse().ok());
        match parent {
            Some(parent) if parent > 1 => current = parent,
            _ => return false,
        }
    }
    false
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A new private directory under the system's temporary directory.
fn private_dir(what: &str) -> io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "redlease-{what}-{}-{}",
        std::process::id(),
        NEXT_SERVER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Writes `request` and reads the first chunk of the reply.
fn exchange(stream: &mut (impl Read + Write), request: &[u8]) -> io::Result<String> {
    stream.write_all(request)?;
    let mut reply = vec![0u8; 64 * 1024];
    let read = stream.read(&mut reply)?;
    Ok(String::from_utf8_lossy(&reply[..read]).into_owned())
}

/// How many hash slots a Redis Cluster has.
const CLUSTER_SLOTS: u16 = 16384;

/// How long a cluster node may be unreachable before the others call it failed
/// (`--cluster-node-timeout`, ms): a failover takes about twice this.
const CLUSTER_NODE_TIMEOUT_MS: u32 = 1000;

/// How long a fresh cluster, or one that changed its slot map, may take to agree everywhere.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);

/// How many keys one `MIGRATE` moves at most.
const MIGRATE_BATCH: usize = 100;

/// A throwaway Redis Cluster: `redis-server` child processes with `--cluster-enabled yes` on
/// free loopback ports, made one cluster by `redis-cli --cluster create` (`redis-cli` from
/// `PATH`, or the path in the `REDLEASE_REDIS_CLI` environment variable, or the one next to
/// `REDLEASE_REDIS_SERVER`). All nodes are killed when it is dropped.
///
/// Every node is a [`RedisServer`] (see [`nodes`](Self::nodes)) and can be killed, paused
/// and restarted like one; a restarted node rejoins with its old identity (its
/// `nodes.conf` stays in its private directory). The nodes run with a 1 s
/// `--cluster-node-timeout` and `--cluster-replica-validity-factor 0`, so a replica takes
/// over about two seconds after its master dies; while a master is down (before its replica
/// is promoted) the whole cluster refuses commands, as a real one does
/// (`cluster-require-full-coverage`).
///
/// Who serves which slot is asked of the nodes each time (`CLUSTER NODES`, `CLUSTER
/// KEYSLOT`), never remembered, so the answers follow failovers and
/// [migrations](Self::begin_migration).
///
/// ```
/// use redlease_testing::RedisCluster;
///
/// let cluster = RedisCluster::start(3, 0).expect("redis-server and redis-cli on PATH");
/// assert_eq!(cluster.seed_urls().len(), 3);
/// assert_eq!(cluster.masters().unwrap().len(), 3);
/// // Keys with the same hash tag share a slot, hence a master.
/// let slot = cluster.key_slot("{tenant-7}:job").unwrap();
/// assert_eq!(cluster.key_slot("{tenant-7}:other").unwrap(), slot);
/// let master = cluster.master_of_key("{tenant-7}:job").unwrap();
/// assert!(master.command(&["SET", "{tenant-7}:job", "1"]).unwrap().starts_with("+OK"));
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// Each node's id (`CLUSTER MYID`), in the order of `nodes`.
    ids: Vec<String>,
}

impl RedisCluster {
    /// Starts `masters` masters (at least 3, which `redis-cli --cluster create` requires)
    /// with `replicas_per_master` replicas each, all at once, and answers once the cluster
    /// is whole (see [`wait_until_settled`](Self::wait_until_settled)): about two seconds for
    /// three masters and three replicas (`redis-cli` waits a second for the nodes to meet,
    /// and a master waits out the node timeout before it calls its cluster ok).
    pub fn start(masters: usize, replicas_per_master: usize) -> io::Result<Self> {
        Self::start_with_args(masters, replicas_per_master, &[])
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments for every node; they
    /// come after the cluster's own, so `["--cluster-node-timeout", "3000"]` replaces the
    /// 1 s one.
    pub fn start_with_args(
        masters: usize,
        replicas_per_master: usize,
        extra_args: &[&str],
    ) -> io::Result<Self> {
        if masters < 3 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a cluster needs at least 3 masters, not {masters}"),
            ));
        }
        let count = masters * (1 + replicas_per_master);
        let node_timeout = CLUSTER_NODE_TIMEOUT_MS.to_string();
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            node_timeout.as_str(),
            // A replica may take over however long it was cut off from its master.
            "--cluster-replica-validity-factor",
            "0",
            // Replicas synchronize at once, without waiting for more of them.
            "--repl-diskless-sync-delay",
            "0",
        ];
        args.extend_from_slice(extra_args);
        let nodes = std::thread::scope(|scope| {
            let starts: Vec<_> = (0..count)
                .map(|_| scope.spawn(|| start_cluster_node(&args)))
                .collect();
            starts
                .into_iter()
                .map(|start| {
                    start
                        .join()
                        .unwrap_or_else(|_| Err(io::Error::other("a node start panicked")))
                })
                .collect::<io::Result<Vec<_>>>()
        })?;
        let ids = nodes
            .iter()
            .map(|node| node.call_text(&["CLUSTER", "MYID"]))
            .collect::<io::Result<_>>()?;
        let cluster = RedisCluster { nodes, ids };
        cluster.create(replicas_per_master)?;
        cluster.wait_until_settled(CLUSTER_DEADLINE)?;
        Ok(cluster)
    }

    /// Every node, live or killed, in the order they were started (the masters that
    /// `redis-cli --cluster create` picked first).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The node on `port`, if one of this cluster's nodes listens there.
    pub fn node(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|node| node.port == port)
    }

    /// The node on `port`, to kill or restart it.
    pub fn node_mut(&mut self, port: u16) -> Option<&mut RedisServer> {
        self.nodes.iter_mut().find(|node| node.port == port)
    }

    /// A node's cluster id (`CLUSTER MYID`), which a restart keeps.
    ///
    /// # Panics
    /// When `node` is not one of this cluster's nodes.
    pub fn node_id(&self, node: &RedisServer) -> &str {
        let index = self
            .index_of(node)
            .unwrap_or_else(|| panic!("port {} is not a node of this cluster", node.port));
        &self.ids[index]
    }

    /// `redis://127.0.0.1:<port>/` of every node, killed ones included.
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The live nodes that are masters now, each by its own account.
    pub fn masters(&self) -> io::Result<Vec<&RedisServer>> {
        self.live_with_role("master")
    }

    /// The live nodes that are replicas now, each by its own account.
    pub fn replicas(&self) -> io::Result<Vec<&RedisServer>> {
        self.live_with_role("slave")
    }

    /// The live nodes that replicate `master` now, each by its own account.
    pub fn replicas_of(&self, master: &RedisServer) -> io::Result<Vec<&RedisServer>> {
        let master_id = self.node_id(master);
        let mut replicas = Vec::new();
        for (_, node) in self.live() {
            let myself = myself_in(&node.cluster_view()?, node)?;
            if myself.master_id.as_deref() == Some(master_id) {
                replicas.push(node);
            }
        }
        Ok(replicas)
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, asked of a live node).
    pub fn key_slot(&self, key: &str) -> io::Result<u16> {
        let node = self.any_live()?;
        let words = ["CLUSTER", "KEYSLOT", key];
        match node.call(&words)? {
            Reply::Integer(slot) => u16::try_from(slot).map_err(io::Error::other),
            other => Err(unexpected(node.port, &words, &other)),
        }
    }

    /// The master that serves `slot` as a live node sees it (`CLUSTER NODES`): right after a
    /// master is killed, that may be the killed one, until its replica takes over (see
    /// [`wait_for_failover`](Self::wait_for_failover)).
    pub fn master_of_slot(&self, slot: u16) -> io::Result<&RedisServer> {
        check_slot(slot)?;
        let asked = self.any_live()?;
        let view = asked.cluster_view()?;
        let owner = view
            .iter()
            .find(|line| line.has("master") && line.owns(slot))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("port {}: nobody serves slot {slot}", asked.port),
                )
            })?;
        self.node_with_id(&owner.id)
    }

    /// The master that serves `key`'s slot (see [`master_of_slot`](Self::master_of_slot)).
    pub fn master_of_key(&self, key: &str) -> io::Result<&RedisServer> {
        self.master_of_slot(self.key_slot(key)?)
    }

    /// The slot ranges (first, last) that `master` serves, by its own account.
    pub fn slots_of(&self, master: &RedisServer) -> io::Result<Vec<(u16, u16)>> {
        Ok(myself_in(&master.cluster_view()?, master)?.slots)
    }

    /// The keys in `slot` on the master that serves it (`CLUSTER GETKEYSINSLOT`).
    pub fn keys_in_slot(&self, slot: u16) -> io::Result<Vec<String>> {
        self.master_of_slot(slot)?.keys_in_slot(slot, usize::MAX)
    }

    /// Kills (`SIGKILL`) the master that serves `slot` and answers its port; its replica, if
    /// it has one, takes over about two seconds later
    /// ([`wait_for_failover`](Self::wait_for_failover)).
    pub fn kill_master_of_slot(&mut self, slot: u16) -> io::Result<u16> {
        let port = self.master_of_slot(slot)?.port;
        self.node_mut(port)
            .expect("the master is a node of the cluster")
            .kill()?;
        Ok(port)
    }

    /// Waits until a live master serves `slot` and the cluster is settled again (see
    /// [`wait_until_settled`](Self::wait_until_settled)), at most `within`, and answers
    /// that master: after [`kill_master_of_slot`](Self::kill_master_of_slot), the promoted
    /// replica.
    ///
    /// # Errors
    /// [`io::ErrorKind::TimedOut`], saying what was still missing, when that does not
    /// happen by then.
    pub fn wait_for_failover(&self, slot: u16, within: Duration) -> io::Result<&RedisServer> {
        check_slot(slot)?;
        let owner = self.wait_for(within, |owners| {
            owners
                .iter()
                .find(|(first, last, _)| (*first..=*last).contains(&slot))
                .map(|(_, _, owner)| *owner)
                .ok_or_else(|| format!("nobody serves slot {slot}"))
        })?;
        Ok(&self.nodes[owner])
    }

    /// Waits until the cluster is settled, at most `within`: every live node reports
    /// `cluster_state:ok` with all 16384 slots assigned, knows every other live node in good
    /// standing (not failed, not in handshake), and sees the same live masters serving the
    /// same slots and the same live replicas replicating the same masters; every live replica
    /// has its link to its master up (`master_link_status:up`). A paused node counts as live
    /// (and makes this time out).
    ///
    /// # Errors
    /// [`io::ErrorKind::TimedOut`], saying what was still missing, when the cluster is not
    /// settled by then.
    pub fn wait_until_settled(&self, within: Duration) -> io::Result<()> {
        self.wait_for(within, |_| Ok(()))
    }

    /// Moves `slot` with its keys to the master `to`, the whole way:
    /// [`begin_migration`](Self::begin_migration), then
    /// [`finish`](SlotMigration::finish).
    pub fn migrate_slot(&self, slot: u16, to: &RedisServer) -> io::Result<()> {
        self.begin_migration(slot, to)?.finish()
    }

    /// Starts moving `slot` to the master `to`: `CLUSTER SETSLOT <slot> IMPORTING <source>`
    /// on `to`, then `CLUSTER SETSLOT <slot> MIGRATING <to>` on the master that serves it now.
    /// From then on the source answers commands on keys of the slot it still has, and `ASK`
    /// redirects those on keys it has not (to `to`, which serves them after `ASKING`), until
    /// the [keys are moved](SlotMigration::move_keys) and the migration is
    /// [finished](SlotMigration::finish).
    ///
    /// ```
    /// use redlease_testing::RedisCluster;
    ///
    /// let cluster = RedisCluster::start(3, 0).expect("redis-server and redis-cli on PATH");
    /// let slot = cluster.key_slot("moving").unwrap();
    /// let source = cluster.master_of_slot(slot).unwrap();
    /// source.command(&["SET", "moving", "1"]).unwrap();
    /// let target = *cluster.masters().unwrap().iter().find(|m| m.port() != source.port()).unwrap();
    ///
    /// let migration = cluster.begin_migration(slot, target).unwrap();
    /// // The source still serves the key it has...
    /// assert!(source.command(&["GET", "moving"]).unwrap().ends_with("1\r\n"));
    /// assert_eq!(migration.move_keys().unwrap(), 1);
    /// // ...and redirects for it once it has moved.
    /// assert!(source.command(&["GET", "moving"]).unwrap().starts_with("-ASK"));
    /// migration.finish().unwrap();
    /// assert_eq!(cluster.master_of_slot(slot).unwrap().port(), target.port());
    /// ```
    pub fn begin_migration(&self, slot: u16, to: &RedisServer) -> io::Result<SlotMigration<'_>> {
        check_slot(slot)?;
        let invalid = |message: String| io::Error::new(io::ErrorKind::InvalidInput, message);
        let source = self
            .index_of(self.master_of_slot(slot)?)
            .expect("the master is a node of the cluster");
        let target = self
            .index_of(to)
            .ok_or_else(|| invalid(format!("port {} is not a node of this cluster", to.port)))?;
        if source == target {
            return Err(invalid(format!(
                "port {} serves slot {slot} already",
                to.port
            )));
        }
        if !myself_in(&to.cluster_view()?, to)?.has("master") {
            return Err(invalid(format!("port {} is not a master", to.port)));
        }
        let slot_text = slot.to_string();
        to.call_ok(&[
            "CLUSTER",
            "SETSLOT",
            &slot_text,
            "IMPORTING",
            &self.ids[source],
        ])?;
        self.nodes[source].call_ok(&[
            "CLUSTER",
            "SETSLOT",
            &slot_text,
            "MIGRATING",
            &self.ids[target],
        ])?;
        Ok(SlotMigration {
            cluster: self,
            slot,
            source,
            target,
        })
    }

    /// Runs `redis-cli --cluster create` on every node.
    fn create(&self, replicas_per_master: usize) -> io::Result<()> {
        let mut create = Command::new(redis_cli());
        create
            .args(["--cluster", "create"])
            .args(
                self.nodes
                    .iter()
                    .map(|node| format!("127.0.0.1:{}", node.port)),
            )
            .args(["--cluster-replicas", &replicas_per_master.to_string()])
            .arg("--cluster-yes");
        run_to_success(
            &mut create,
            "redis-cli --cluster create",
            "install redis-cli",
        )
    }

    /// Polls until the cluster is settled and `accept` takes its slot map (first slot, last
    /// slot, index of the node that serves them), at most `within`; answers what `accept`
    /// answered.
    fn wait_for<T>(
        &self,
        within: Duration,
        mut accept: impl FnMut(&[(u16, u16, usize)]) -> Result<T, String>,
    ) -> io::Result<T> {
        let deadline = Instant::now() + within;
        loop {
            let why_not = match self.settled_slot_map() {
                Ok(owners) => match accept(&owners) {
                    Ok(accepted) => return Ok(accepted),
                    Err(why_not) => why_not,
                },
                Err(why_not) => why_not,
            };
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the cluster did not settle within {within:?}: {why_not}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The slot map that every live node agrees on, when the cluster is settled (see
    /// [`wait_until_settled`](Self::wait_until_settled)); else what is amiss.
    fn settled_slot_map(&self) -> Result<Vec<(u16, u16, usize)>, String> {
        let mut agreed = None;
        let mut asked_any = false;
        for (_, node) in self.live() {
            asked_any = true;
            let port = node.port;
            let failed = |err: io::Error| format!("port {port}: {err}");
            let info = node.call_text(&["CLUSTER", "INFO"]).map_err(failed)?;
            for wanted in ["cluster_state:ok", "cluster_slots_assigned:16384"] {
                if !info.lines().any(|line| line.trim_end() == wanted) {
                    return Err(format!("port {port} does not report {wanted}"));
                }
            }
            let view = node.cluster_view().map_err(failed)?;
            let myself = myself_in(&view, node).map_err(failed)?;
            if myself.has("slave") {
                let replication = node.call_text(&["INFO", "replication"]).map_err(failed)?;
                if !replication.contains("master_link_status:up") {
                    return Err(format!("replica on port {port} has no link to its master"));
                }
            }
            for (index, other) in self.live() {
                let line = view
                    .iter()
                    .find(|line| line.id == self.ids[index])
                    .ok_or_else(|| format!("port {port} does not know port {}", other.port))?;
                if let Some(flag) = ["fail", "fail?", "handshake", "noaddr"]
                    .into_iter()
                    .find(|flag| line.has(flag))
                {
                    return Err(format!("port {port} sees port {} {flag}", other.port));
                }
            }
            let mut owners: Vec<(u16, u16, String)> = view
                .iter()
                .filter(|line| line.has("master"))
                .flat_map(|line| {
                    line.slots
                        .iter()
                        .map(|&(first, last)| (first, last, line.id.clone()))
                })
                .collect();
            owners.sort_unstable();
            let mut replicas: Vec<(String, Option<String>)> = view
                .iter()
                .filter(|line| line.has("slave") && self.is_live_id(&line.id))
                .map(|line| (line.id.clone(), line.master_id.clone()))
                .collect();
            replicas.sort_unstable();
            match &agreed {
                None => agreed = Some((owners, replicas)),
                Some(seen) if *seen == (owners, replicas) => {}
                Some(_) => return Err(format!("port {port} sees another slot map")),
            }
        }
        if !asked_any {
            return Err("no node is alive".to_owned());
        }
        let (owners, _) = agreed.unwrap_or_default();
        owners
            .into_iter()
            .map(|(first, last, id)| {
                let index = self
                    .ids
                    .iter()
                    .position(|known| *known == id)
                    .ok_or_else(|| format!("slots {first}-{last}: unknown node {id}"))?;
                if self.nodes[index].child.is_none() {
                    return Err(format!(
                        "slots {first}-{last}: served by port {}, which is dead",
                        self.nodes[index].port
                    ));
                }
                Ok((first, last, index))
            })
            .collect()
    }

    /// The live nodes whose own `CLUSTER NODES` line carries `role`.
    fn live_with_role(&self, role: &str) -> io::Result<Vec<&RedisServer>> {
        let mut found = Vec::new();
        for (_, node) in self.live() {
            if myself_in(&node.cluster_view()?, node)?.has(role) {
                found.push(node);
            }
        }
        Ok(found)
    }

    /// The nodes that run (paused ones included), with their indexes.
    fn live(&self) -> impl Iterator<Item = (usize, &RedisServer)> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, node)| node.child.is_some())
    }

    fn any_live(&self) -> io::Result<&RedisServer> {
        self.live()
            .map(|(_, node)| node)
            .next()
            .ok_or_else(|| io::Error::other("no node of the cluster is alive"))
    }

    fn is_live_id(&self, id: &str) -> bool {
        self.live().any(|(index, _)| self.ids[index] == id)
    }

    fn index_of(&self, node: &RedisServer) -> Option<usize> {
        self.nodes.iter().position(|known| known.port == node.port)
    }

    fn node_with_id(&self, id: &str) -> io::Result<&RedisServer> {
        self.ids
            .iter()
            .position(|known| known == id)
            .map(|index| &self.nodes[index])
            .ok_or_else(|| io::Error::other(format!("node {id} is not one of the cluster's")))
    }
}

/// A slot on its way from one master to another, begun by
/// [`RedisCluster::begin_migration`]: the source has it `MIGRATING`, the target
/// `IMPORTING`, until [`finish`](Self::finish). Dropping it unfinished leaves the slot so.
#[derive(Debug)]
pub struct SlotMigration<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    source: usize,
    target: usize,
}

impl SlotMigration<'_> {
    /// The slot that moves.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The master the slot moves from.
    pub fn source(&self) -> &RedisServer {
        &self.cluster.nodes[self.source]
    }

    /// The master the slot moves to.
    pub fn target(&self) -> &RedisServer {
        &self.cluster.nodes[self.target]
    }

    /// Moves the keys of the slot that the source has now to the target
    /// (`CLUSTER GETKEYSINSLOT`, then `MIGRATE ... KEYS`, 100 at a time, until none is left),
    /// with their time to live; answers how many it moved. Can be called more than once.
    pub fn move_keys(&self) -> io::Result<usize> {
        let source = self.source();
        let target_port = self.target().port.to_string();
        let mut moved = 0;
        loop {
            let keys = source.keys_in_slot(self.slot, MIGRATE_BATCH)?;
            if keys.is_empty() {
                return Ok(moved);
            }
            let mut words = vec![
                "MIGRATE",
                "127.0.0.1",
                &target_port,
                "",
                "0",
                "5000",
                "KEYS",
            ];
            words.extend(keys.iter().map(String::as_str));
            match source.call(&words)? {
                // NOKEY: they were all deleted in the meantime.
                Reply::Status(status) if status == "OK" || status == "NOKEY" => {}
                other => return Err(unexpected(source.port, &words[..7], &other)),
            }
            moved += keys.len();
        }
    }

    /// Moves the keys left (see [`move_keys`](Self::move_keys)), then gives the slot to the
    /// target: `CLUSTER SETSLOT <slot> NODE <target>` on the target, the source and every
    /// other master; answers once every live node agrees (see
    /// [`RedisCluster::wait_until_settled`]). The source then ends its clients' shard
    /// subscriptions to channels of the slot (it sends them `sunsubscribe`).
    pub fn finish(self) -> io::Result<()> {
        self.move_keys()?;
        let cluster = self.cluster;
        let slot_text = self.slot.to_string();
        let target_id = cluster.ids[self.target].as_str();
        let set_node = ["CLUSTER", "SETSLOT", slot_text.as_str(), "NODE", target_id];
        self.target().call_ok(&set_node)?;
        self.source().call_ok(&set_node)?;
        for master in cluster.masters()? {
            if master.port != self.source().port && master.port != self.target().port {
                master.call_ok(&set_node)?;
            }
        }
        cluster.wait_for(CLUSTER_DEADLINE, |owners| {
            let served_by_target = owners.iter().any(|&(first, last, owner)| {
                owner == self.target && (first..=last).contains(&self.slot)
            });
            if served_by_target {
                Ok(())
            } else {
                Err(format!("slot {} has not moved yet", self.slot))
            }
        })
    }
}

/// One node's line of `CLUSTER NODES`, as one node sees it.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    flags: Vec<String>,
    /// The master it replicates, for a replica.
    master_id: Option<String>,
    /// Slot ranges it serves (first, last), without the slots being moved.
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    /// `<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>...`
    fn parse(line: &str) -> Option<NodeLine> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, _address, flags, master, _ping, _pong, _epoch, _link, slots @ ..] =
            fields.as_slice()
        else {
            return None;
        };
        let slots = slots
            .iter()
            // `[slot->-id]` and `[slot-<-id]`: a slot being moved, not served.
            .filter(|slot| !slot.starts_with('['))
            .map(|slot| match slot.split_once('-') {
                Some((first, last)) => Some((first.parse().ok()?, last.parse().ok()?)),
                None => slot.parse().ok().map(|slot| (slot, slot)),
            })
            .collect::<Option<_>>()?;
        Some(NodeLine {
            id: id.to_string(),
            flags: flags.split(',').map(str::to_owned).collect(),
            master_id: (*master != "-").then(|| master.to_string()),
            slots,
        })
    }

    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|known| known == flag)
    }

    fn owns(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|&(first, last)| (first..=last).contains(&slot))
    }
}

/// The line `node` has about itself in its `view`.
fn myself_in(view: &[NodeLine], node: &RedisServer) -> io::Result<NodeLine> {
    view.iter()
        .find(|line| line.has("myself"))
        .cloned()
        .ok_or_else(|| io::Error::other(format!("port {}: no myself in CLUSTER NODES", node.port)))
}

fn check_slot(slot: u16) -> io::Result<()> {
    if slot < CLUSTER_SLOTS {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("no slot {slot}: slots go from 0 to {}", CLUSTER_SLOTS - 1),
        ))
    }
}

/// Starts one cluster node on a free port whose cluster bus port (10000 above it) is free
/// too.
fn start_cluster_node(args: &[&str]) -> io::Result<RedisServer> {
    let mut last_error = None;
    for _ in 0..5 {
        let mut node = RedisServer::unstarted(args)?;
        let config = node.dir.join("nodes.conf");
        node.extra_args.push("--cluster-config-file".to_owned());
        node.extra_args.push(config.to_string_lossy().into_owned());
        let node = match node.start_on(free_cluster_port) {
            Ok(node) => node,
            Err(err) => {
                last_error = Some(err);
                continue;
            }
        };
        // Another server may have answered on a port this one could not bind after all.
        let pid = node.pid().unwrap_or_default();
        match node.call_text(&["INFO", "server"]) {
            Ok(info) if info.contains(&format!("process_id:{pid}\r\n")) => return Ok(node),
            Ok(_) => last_error = Some(io::Error::other("another server took the port")),
            Err(err) => last_error = Some(err),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::other("a cluster node did not start")))
}

/// A free port below 55536 whose cluster bus port (10000 above) is free too.
fn free_cluster_port() -> io::Result<u16> {
    for _ in 0..100 {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        if let Some(bus_port) = port.checked_add(10000) {
            if TcpListener::bind(("127.0.0.1", bus_port)).is_ok() {
                return Ok(port);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no free port with a free cluster bus port",
    ))
}

/// `redis-cli`: the `REDLEASE_REDIS_CLI` environment variable, else the one next to
/// `REDLEASE_REDIS_SERVER` when that is a path and it is there, else from `PATH`.
fn redis_cli() -> std::ffi::OsString {
    if let Some(cli) = std::env::var_os("REDLEASE_REDIS_CLI") {
        return cli;
    }
    if let Some(server) = std::env::var_os("REDLEASE_REDIS_SERVER") {
        let server = Path::new(&server);
        if server
            .parent()
            .is_some_and(|dir| !dir.as_os_str().is_empty())
        {
            let sibling = server.with_file_name("redis-cli");
            if sibling.is_file() {
                return sibling.into_os_string();
            }
        }
    }
    "redis-cli".into()
}

/// One reply of the Redis protocol (RESP2), as [`RedisServer`]'s own checks read it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Status(String),
    Error(String),
    Integer(i64),
    /// A bulk string (text, lossily), or nil.
    Bulk(Option<String>),
    /// An array, or nil.
    Array(Option<Vec<Reply>>),
}

/// The host's monotonic clock in ns, the same in every process: for events of several
/// processes put in one order.
pub fn now_ns() -> u64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid timespec for the call to fill.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut time) };
    assert_eq!(status, 0, "clock_gettime");
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

/// Polls `condition` every 10 ms until it holds or `within` passes; answers whether it held.
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

/// Runs `command` (`what`, for messages) to its end with no input, and fails with its
/// output unless it succeeded; `install` says what to do when it cannot be run at all.
fn run_to_success(command: &mut Command, what: &str, install: &str) -> io::Result<()> {
    let output = command.stdin(Stdio::null()).output().map_err(|err| {
        let program = command.get_program();
        io::Error::new(
            err.kind(),
            format!("cannot run {program:?} ({install}): {err}"),
        )
    })?;
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "{what} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(())
}

/// Sends `request` (commands in RESP) to the plaintext server on `port` on a new connection
/// and reads one whole reply.
fn call_plain(port: u16, request: &str) -> io::Result<Reply> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(STARTUP_DEADLINE))?;
    stream.set_write_timeout(Some(STARTUP_DEADLINE))?;
    stream.write_all(request.as_bytes())?;
    read_reply(&mut io::BufReader::new(stream))
}

/// One command (as words) in RESP.
fn request_of(words: &[&str]) -> String {
    let mut request = format!("*{}\r\n", words.len());
    for word in words {
        request.push_str(&format!("${}\r\n{word}\r\n", word.len()));
    }
    request
}

/// Reads one whole reply.
fn read_reply(input: &mut impl io::BufRead) -> io::Result<Reply> {
    let mut line = Vec::new();
    input.read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\r\n") {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    line.truncate(line.len() - 2);
    let text = String::from_utf8_lossy(line.get(1..).unwrap_or_default()).into_owned();
    let length = || {
        text.parse::<i64>()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("length {text:?}")))
    };
    match line.first() {
        Some(b'+') => Ok(Reply::Status(text)),
        Some(b'-') => Ok(Reply::Error(text)),
        Some(b':') => Ok(Reply::Integer(length()?)),
        Some(b'$') => match usize::try_from(length()?) {
            Err(_) => Ok(Reply::Bulk(None)),
            Ok(length) => {
                let mut bulk = vec![0u8; length + 2];
                input.read_exact(&mut bulk)?;
                bulk.truncate(length);
                Ok(Reply::Bulk(Some(
                    String::from_utf8_lossy(&bulk).into_owned(),
                )))
            }
        },
        Some(b'*') => match usize::try_from(length()?) {
            Err(_) => Ok(Reply::Array(None)),
            Ok(count) => (0..count)
                .map(|_| read_reply(input))
                .collect::<io::Result<_>>()
                .map(|items| Reply::Array(Some(items))),
        },
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a reply: {:?}", String::from_utf8_lossy(&line)),
        )),
    }
}

/// The error for a reply a check did not expect (an error reply among them).
fn unexpected(port: u16, words: &[&str], reply: &Reply) -> io::Error {
    io::Error::other(format!(
        "{} on port {port} answered {reply:?}",
        words.join(" ")
    ))
}

/// The host name in the certificate that [`TlsServerOptions::wrong_name_certificate`] picks.
#[cfg(feature = "tls")]
pub const WRONG_NAME: &str = "not-this-host.test";

/// A throwaway certificate authority and certificates made with the `openssl` command in a
/// private temporary directory, removed when dropped. EC P-256 keys (PKCS#8 PEM), valid
/// for three days from now:
/// - [`ca_certificate`](Self::ca_certificate): the CA that signs the others;
/// - [`server_certificate`](Self::server_certificate): for `localhost` and `127.0.0.1`;
/// - [`wrong_name_certificate`](Self::wrong_name_certificate): for [`WRONG_NAME`] only;
/// - [`client_certificate`](Self::client_certificate): for mutual TLS;
/// - [`other_ca_certificate`](Self::other_ca_certificate): an unrelated CA, which signed
///   none of them, and [`other_client_certificate`](Self::other_client_certificate) signed
///   by it.
///
/// ```
/// let files = redlease_testing::TlsFiles::generate().expect("openssl on PATH");
/// let pem = std::fs::read(files.ca_certificate()).unwrap();
/// assert!(pem.starts_with(b"-----BEGIN CERTIFICATE-----"));
/// ```
#[cfg(feature = "tls")]
#[derive(Debug)]
pub struct TlsFiles {
    dir: PathBuf,
}

#[cfg(feature = "tls")]
impl TlsFiles {
    /// Makes the CAs, keys and certificates (about ten runs of `openssl`, well under a second).
    pub fn generate() -> io::Result<Self> {
        let files = TlsFiles {
            dir: private_dir("tls")?,
        };
        std::fs::write(files.path("openssl.cnf"), OPENSSL_CONFIG)?;
        files.make_ca("ca", "redlease test CA")?;
        files.make_ca("other-ca", "redlease unrelated CA")?;
        files.make_signed("server", "localhost", "ca", "server", 1)?;
        files.make_signed("wrong-name", WRONG_NAME, "ca", "wrong_name", 2)?;
        files.make_signed("client", "redlease test client", "ca", "client", 3)?;
        files.make_signed(
            "other-client",
            "redlease other client",
            "other-ca",
            "client",
            1,
        )?;
        Ok(files)
    }

    /// The directory that holds the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM) that signed the server and client certificates.
    pub fn ca_certificate(&self) -> PathBuf {
        self.path("ca.crt")
    }

    /// A CA certificate (PEM) that signed none of the server certificates.
    pub fn other_ca_certificate(&self) -> PathBuf {
        self.path("other-ca.crt")
    }

    /// The server certificate (PEM), for `localhost` and `127.0.0.1`.
    pub fn server_certificate(&self) -> PathBuf {
        self.path("server.crt")
    }

    /// The server certificate's private key (PEM).
    pub fn server_key(&self) -> PathBuf {
        self.path("server.key")
    }

    /// A server certificate (PEM) of the same CA for [`WRONG_NAME`] only.
    pub fn wrong_name_certificate(&self) -> PathBuf {
        self.path("wrong-name.crt")
    }

    /// The wrong-name certificate's private key (PEM).
    pub fn wrong_name_key(&self) -> PathBuf {
        self.path("wrong-name.key")
    }

    /// A client certificate (PEM) signed by the CA, for mutual TLS.
    pub fn client_certificate(&self) -> PathBuf {
        self.path("client.crt")
    }

    /// The client certificate's private key (PEM).
    pub fn client_key(&self) -> PathBuf {
        self.path("client.key")
    }

    /// A client certificate (PEM) signed by the unrelated CA, which a server trusting only
    /// the test CA refuses.
    pub fn other_client_certificate(&self) -> PathBuf {
        self.path("other-client.crt")
    }

    /// The unrelated client certificate's private key (PEM).
    pub fn other_client_key(&self) -> PathBuf {
        self.path("other-client.key")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn make_ca(&self, name: &str, common_name: &str) -> io::Result<()> {
        self.openssl(&[
            "req",
            "-x509",
            "-config",
            "openssl.cnf",
            "-extensions",
            "ca",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "3",
            "-subj",
            &format!("/CN={common_name}"),
        ])
    }

    /// A key and a certificate for `common_name`, signed by the CA `issuer`, with the
    /// extensions of the config `section`.
    fn make_signed(
        &self,
        name: &str,
        common_name: &str,
        issuer: &str,
        section: &str,
        serial: u32,
    ) -> io::Result<()> {
        self.openssl(&[
            "req",
            "-config",
            "openssl.cnf",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={common_name}"),
        ])?;
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{issuer}.crt"),
            "-CAkey",
            &format!("{issuer}.key"),
            "-set_serial",
            &serial.to_string(),
            "-days",
            "3",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            section,
            "-out",
            &format!("{name}.crt"),
        ])
    }

    fn openssl(&self, args: &[&str]) -> io::Result<()> {
        let mut openssl = Command::new("openssl");
        openssl.args(args).current_dir(&self.dir);
        let what = format!("openssl {}", args.join(" "));
        run_to_success(&mut openssl, &what, "install it: scripts/ensure-redis.sh")
    }
}

#[cfg(feature = "tls")]
impl Drop for TlsFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The extensions of the generated certificates; the system's own openssl config is not read.
#[cfg(feature = "tls")]
const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
[wrong_name]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:not-this-host.test
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
";

/// How [`RedisServer::start_tls`] sets up a TLS-only server: by default with the server
/// certificate of [`TlsFiles`] (for `localhost` and `127.0.0.1`), trusting client
/// certificates of its CA but not asking for one (`--tls-auth-clients no`).
#[cfg(feature = "tls")]
#[derive(Debug, Clone, Default)]
pub struct TlsServerOptions {
    require_client_certificates: bool,
    wrong_name_certificate: bool,
    extra_args: Vec<String>,
}

#[cfg(feature = "tls")]
impl TlsServerOptions {
    /// Refuses clients without a certificate of the CA (`--tls-auth-clients yes`).
    pub fn require_client_certificates(mut self) -> Self {
        self.require_client_certificates = true;
        self
    }

    /// Shows the certificate for [`WRONG_NAME`] instead of the one for `localhost`.
    pub fn wrong_name_certificate(mut self) -> Self {
        self.wrong_name_certificate = true;
        self
    }

    /// More `redis-server` arguments.
    pub fn args(mut self, extra_args: &[&str]) -> Self {
        self.extra_args
            .extend(extra_args.iter().map(|arg| arg.to_string()));
        self
    }
}

#[cfg(feature = "tls")]
impl RedisServer {
    /// Starts a TLS-only server (no plaintext port) with the certificates of `files`; its
    /// [`url`](Self::url) is `rediss://localhost:<port>/`. [`command`](Self::command) speaks
    /// TLS to it.
    ///
    /// ```
    /// use redlease_testing::{RedisServer, TlsFiles, TlsServerOptions};
    ///
    /// let files = TlsFiles::generate().expect("openssl on PATH");
    /// let redis = RedisServer::start_tls(&files, &TlsServerOptions::default()).unwrap();
    /// assert!(redis.url().starts_with("rediss://localhost:"));
    /// assert!(redis.command(&["PING"]).unwrap().starts_with("+PONG"));
    /// ```
    pub fn start_tls(files: &TlsFiles, options: &TlsServerOptions) -> io::Result<Self> {
        let server = RedisServer {
            child: None,
            port: 0,
            dir: private_dir("redis")?,
            extra_args: options.extra_args.clone(),
            program: None,
            tls: Some(ServerTls::new(files, options)?),
        };
        server.start_on_a_free_port()
    }

    /// Starts `count` TLS-only servers like [`start_tls`](Self::start_tls), all at once.
    pub fn start_tls_many(
        count: usize,
        files: &TlsFiles,
        options: &TlsServerOptions,
    ) -> io::Result<Vec<Self>> {
        std::thread::scope(|scope| {
            let starts: Vec<_> = (0..count)
                .map(|_| scope.spawn(|| RedisServer::start_tls(files, options)))
                .collect();
            starts
                .into_iter()
                .map(|start| {
                    start
                        .join()
                        .unwrap_or_else(|_| Err(io::Error::other("a server start panicked")))
                })
                .collect()
        })
    }
}

/// A TLS-only server's files, and the client set-up that the server's own checks use.
#[cfg(feature = "tls")]
#[derive(Debug)]
struct ServerTls {
    certificate: PathBuf,
    key: PathBuf,
    ca_certificate: PathBuf,
    require_client_certificates: bool,
    /// The name its certificate is valid for.
    name: rustls::pki_types::ServerName<'static>,
    client: Arc<rustls::ClientConfig>,
}

#[cfg(feature = "tls")]
impl ServerTls {
    fn new(files: &TlsFiles, options: &TlsServerOptions) -> io::Result<Self> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

        let (certificate, key, name) = if options.wrong_name_certificate {
            (
                files.wrong_name_certificate(),
                files.wrong_name_key(),
                WRONG_NAME,
            )
        } else {
            (files.server_certificate(), files.server_key(), "localhost")
        };
        let pem_error = |err| io::Error::new(io::ErrorKind::InvalidData, format!("{err:?}"));
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(files.ca_certificate()).map_err(pem_error)? {
            roots
                .add(ca.map_err(pem_error)?)
                .map_err(io::Error::other)?;
        }
        let chain = CertificateDer::pem_file_iter(files.client_certificate())
            .map_err(pem_error)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(pem_error)?;
        let client_key = PrivateKeyDer::from_pem_file(files.client_key()).map_err(pem_error)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, client_key)
            .map_err(io::Error::other)?;
        Ok(ServerTls {
            certificate,
            key,
            ca_certificate: files.ca_certificate(),
            require_client_certificates: options.require_client_certificates,
            name: ServerName::try_from(name)
                .map_err(io::Error::other)?
                .to_owned(),
            client: Arc::new(client),
        })
    }

    /// The arguments that make the server listen with TLS only, on `port`.
    fn arguments(&self, port: u16) -> Vec<String> {
        let path = |path: &Path| path.to_string_lossy().into_owned();
        let auth = if self.require_client_certificates {
            "yes"
        } else {
            "no"
        };
        [
            "--port".to_owned(),
            "0".to_owned(),
            "--tls-port".to_owned(),
            port.to_string(),
            "--tls-cert-file".to_owned(),
            path(&self.certificate),
            "--tls-key-file".to_owned(),
            path(&self.key),
            "--tls-ca-cert-file".to_owned(),
            path(&self.ca_certificate),
            "--tls-auth-clients".to_owned(),
            auth.to_owned(),
        ]
        .into()
    }

    /// A TLS stream over `socket`, checked against the server's certificate name.
    fn stream(
        &self,
        socket: TcpStream,
    ) -> io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
        let session = rustls::ClientConnection::new(Arc::clone(&self.client), self.name.clone())
            .map_err(io::Error::other)?;
        Ok(rustls::StreamOwned::new(session, socket))
    }
}

/// The server program the fixtures run: the `REDLEASE_REDIS_SERVER` environment variable, else
/// `redis-server` from `PATH`.
pub fn server_program() -> std::ffi::OsString {
    std::env::var_os("REDLEASE_REDIS_SERVER").unwrap_or_else(|| "redis-server".into())
}

/// Whether `program` has `WAITAOF` (Redis 7.2 or later, or any Valkey), read from its
/// `--version` (`Redis server v=7.0.15 ...`, `Valkey server v=9.1.2 ...`); `None` when it
/// cannot be run.
pub fn has_waitaof(program: &std::ffi::OsStr) -> Option<bool> {
    let output = Command::new(program).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    if text.starts_with("Valkey") {
        return Some(true);
    }
    let version = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))?;
    let mut parts = version
        .split('.')
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next()?, parts.next().unwrap_or(0));
    Some((major, minor) >= (7, 2))
}

/// A server program with `WAITAOF`: the fixtures' own ([`server_program`]) when it has it,
/// else the one named by the `REDLEASE_WAITAOF_SERVER` environment variable (the test script
/// sets it to a Valkey build). `Err` says why there is none.
pub fn waitaof_program() -> Result<std::ffi::OsString, String> {
    let default = server_program();
    if has_waitaof(&default) == Some(true) {
        return Ok(default);
    }
    let Some(other) = std::env::var_os("REDLEASE_WAITAOF_SERVER") else {
        return Err(format!(
            "{default:?} has no WAITAOF (Redis 7.2 or later, or Valkey), and \
             REDLEASE_WAITAOF_SERVER names no other server"
        ));
    };
    match has_waitaof(&other) {
        Some(true) => Ok(other),
        _ => Err(format!(
            "REDLEASE_WAITAOF_SERVER={other:?} cannot be run, or has no WAITAOF"
        )),
    }
}

/// A master and a replica of a server program with `WAITAOF` ([`waitaof_program`]), each
/// with an append-only file fsynced at every write (`--appendonly yes --appendfsync
/// always`), started as [`RedisServer::start_with_replica`] starts its pair. `None`, after
/// printing why to standard error, when no such program is at hand: a test then has nothing
/// to run.
pub fn server_with_waitaof() -> Option<io::Result<(RedisServer, RedisServer)>> {
    match waitaof_program() {
        Ok(program) => Some(RedisServer::start_pair(
            Some(program),
            &["--appendonly", "yes", "--appendfsync", "always"],
        )),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}
