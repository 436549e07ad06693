//! Throwaway Redis Sentinel set-ups on loopback: a [`Sentinel`] process that monitors a
//! master, and a [`SentinelDeployment`] of a master, its replicas and three sentinels, with
//! short timeouts, so a test can kill the master and watch the failover. `redis-sentinel`
//! must be on `PATH`.
//!
//! ```
//! use redlease_testing::{sentinel::{Sentinel, MASTER_NAME}, RedisServer};
//!
//! let master = RedisServer::start().expect("redis-server");
//! let sentinel = Sentinel::start(master.port()).expect("redis-sentinel");
//! assert_eq!(sentinel.master_port(), Some(master.port()));
//! let manager = redlease::LockManager::builder_sentinel([sentinel.url()], MASTER_NAME)
//!     .build()
//!     .unwrap();
//! assert!(!manager.lock("anything").is_locked().unwrap());
//! ```

use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use crate::{call_plain, eventually as wait_for, request_of, RedisServer, Reply};

/// The sentinels' name of the master.
pub const MASTER_NAME: &str = "locks";

/// How long a master may be silent before the sentinels call it down.
const DOWN_AFTER_MS: u32 = 1000;

/// How long a deployment may take to start and settle, at most: a bound against a hang. A
/// loaded 2-core machine starting several deployments at once took over 20 s for the
/// sentinels to see each other (hello messages every 2 s).
const SETTLE: Duration = Duration::from_secs(60);

static NEXT_SENTINEL: AtomicU64 = AtomicU64::new(0);

/// A `redis-sentinel` child process, killed when dropped.
pub struct Sentinel {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Sentinel {
    /// Starts a sentinel that monitors the master on `master_port` (quorum 2).
    pub fn start(master_port: u16) -> io::Result<Sentinel> {
        let dir = std::env::temp_dir().join(format!(
            "redlease-sentinel-{}-{}",
            std::process::id(),
            NEXT_SENTINEL.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let mut last_error = io::Error::other("redis-sentinel did not start");
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            // Sentinel rewrites its configuration file: it must be its own.
            let config = dir.join("sentinel.conf");
            std::fs::write(
                &config,
                format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
                     sentinel failover-timeout {MASTER_NAME} 4000\n\
                     sentinel parallel-syncs {MASTER_NAME} 2\n",
                    dir = dir.display()
                ),
            )?;
            let mut child = Command::new("redis-sentinel")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            let sentinel_up = wait_for(SETTLE, || {
                // A port taken between our choice and the bind answers for someone else.
                matches!(child.try_wait(), Ok(None)) && process_id(port) == Some(child.id())
            });
            if sentinel_up {
                return Ok(Sentinel { child, port, dir });
            }
            let _ = child.kill();
            let _ = child.wait();
            last_error = io::Error::other(format!("redis-sentinel on port {port} did not start"));
        }
        Err(last_error)
    }

    /// The sentinel's URL, for `LockManager::builder_sentinel`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port of the sentinel.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port of the master this sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        let words = ["SENTINEL", "get-master-addr-by-name", MASTER_NAME];
        match call_plain(self.port, &request_of(&words)).ok()? {
            Reply::Array(Some(address)) => match address.get(1)? {
                Reply::Bulk(Some(port)) => port.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether this sentinel sees `replicas` replicas and `others` other sentinels.
    pub fn sees(&self, replicas: u32, others: u32) -> bool {
        let words = ["SENTINEL", "master", MASTER_NAME];
        let Ok(Reply::Array(Some(fields))) = call_plain(self.port, &request_of(&words)) else {
            return false;
        };
        let fields: Vec<&str> = fields
            .iter()
            .map(|field| match field {
                Reply::Bulk(Some(text)) => text.as_str(),
                _ => "",
            })
            .collect();
        let field = |name: &str| -> Option<u32> {
            let at = fields.iter().position(|field| *field == name)?;
            fields.get(at + 1)?.parse().ok()
        };
        field("num-slaves") == Some(replicas) && field("num-other-sentinels") == Some(others)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master, its replicas and three sentinels.
pub struct SentinelDeployment {
    /// The servers; the first is the master at the start.
    pub servers: Vec<RedisServer>,
    /// The three sentinels.
    pub sentinels: Vec<Sentinel>,
}

impl SentinelDeployment {
    /// Starts a master with `replicas` replicas (linked up) and three sentinels that know
    /// all of them and each other. Servers and sentinels start in parallel.
    pub fn start(replicas: usize) -> SentinelDeployment {
        let master = RedisServer::start().expect("master");
        let master_port = master.port().to_string();
        let replicas: Vec<RedisServer> = thread::scope(|scope| {
            let starting: Vec<_> = (0..replicas)
                .map(|_| {
                    scope.spawn(|| {
                        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &master_port])
                            .expect("replica")
                    })
                })
                .collect();
            starting
                .into_iter()
                .map(|replica| replica.join().expect("replica start"))
                .collect()
        });
        for replica in &replicas {
            assert!(
                wait_for(SETTLE, || replica
                    .command(&["INFO", "replication"])
                    .is_ok_and(|info| info.contains("master_link_status:up"))),
                "replica on {} never linked up",
                replica.port()
            );
        }
        let sentinels: Vec<Sentinel> = thread::scope(|scope| {
            let starting: Vec<_> = (0..3)
                .map(|_| scope.spawn(|| Sentinel::start(master.port()).expect("sentinel")))
                .collect();
            starting
                .into_iter()
                .map(|sentinel| sentinel.join().expect("sentinel start"))
                .collect()
        });
        let count = replicas.len() as u32;
        // Sentinels find each other through hello messages every 2 s.
        assert!(
            wait_for(SETTLE, || sentinels
                .iter()
                .all(|sentinel| sentinel.sees(count, 2))),
            "the sentinels never saw the whole deployment"
        );
        let mut servers = vec![master];
        servers.extend(replicas);
        SentinelDeployment { servers, sentinels }
    }

    /// The sentinels' URLs.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::url).collect()
    }

    /// The server the sentinels name as master now (as the first sentinel that answers).
    pub fn master(&self) -> &RedisServer {
        let port = self
            .sentinels
            .iter()
            .find_map(Sentinel::master_port)
            .expect("a sentinel names the master");
        self.server_on(port)
    }

    /// The server of the deployment on `port`.
    pub fn server_on(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|server| server.port() == port)
            .expect("a server of the deployment")
    }

    /// Kills the master with SIGKILL; answers its port.
    pub fn kill_master(&mut self) -> u16 {
        let port = self.master().port();
        let master = self
            .servers
            .iter_mut()
            .find(|server| server.port() == port)
            .expect("the master");
        master.kill().expect("kill the master");
        port
    }

    /// Waits until every sentinel names a master other than the one on `old_port`, and the
    /// new master has taken the role; answers the new master's port.
    pub fn wait_for_failover(&self, old_port: u16, within: Duration) -> u16 {
        let mut promoted = None;
        let done = wait_for(within, || {
            let ports: Vec<Option<u16>> =
                self.sentinels.iter().map(Sentinel::master_port).collect();
            match ports[..] {
                [Some(first), ..]
                    if first != old_port && ports.iter().all(|port| *port == Some(first)) =>
                {
                    promoted = Some(first);
                    self.server_on(first)
                        .command(&["ROLE"])
                        .is_ok_and(|role| role.contains("master"))
                }
                _ => false,
            }
        });
        assert!(done, "no failover within {within:?}");
        promoted.expect("a promoted replica")
    }
}

/// The process id of whatever answers on `port` (`process_id` in `INFO server`).
fn process_id(port: u16) -> Option<u32> {
    let words = ["INFO", "server"];
    match call_plain(port, &request_of(&words)).ok()? {
        Reply::Bulk(Some(info)) => info
            .lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .and_then(|id| id.trim().parse().ok()),
        _ => None,
    }
}
