//! A throwaway `redis-server` process for examples, demos, doc tests and tests.
//!
//! [`RedisServer::start`] runs `redis-server` (from `PATH`, or the path in the
//! `REDLEASE_REDIS_SERVER` environment variable) on a free loopback port with persistence off
//! and a private working directory, and waits until it answers `PING`. The process can be
//! killed, paused (`SIGSTOP`), resumed and restarted on the same port, which is what fault
//! tests need; dropping the value kills it. [`RedisServer::start_with_replica`] starts a
//! master and a replica of it (`--replicaof`) at once, for replication tests. Unix only.
//! Nothing else in the crate uses it, and it is built only with the `testing` feature (off by
//! default).
//!
//! With the `tls` feature too, [`TlsFiles::generate`] makes a throwaway CA and certificates
//! with the `openssl` command, and [`RedisServer::start_tls`] runs a TLS-only server
//! (`--port 0 --tls-port <port>`) with them (`redis-server` must be built with TLS, as
//! Debian's is):
//!
//! ```toml
//! [dev-dependencies]
//! redlease = { version = "0.1", features = ["testing"] }
//! ```
// The links to the TLS helpers, which only the `tls` feature has.
#![cfg_attr(not(feature = "tls"), allow(rustdoc::broken_intra_doc_links))]

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
#[cfg(feature = "tls")]
use std::path::Path;
use std::path::PathBuf;
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

    fn start_on_a_free_port(mut self) -> io::Result<Self> {
        let server = &mut self;
        let mut last_error = None;
        // A free port can be taken by someone else before the server binds it: try again.
        for _ in 0..5 {
            server.port = free_port()?;
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

    /// A server not started yet, with its private directory made.
    fn unstarted(extra_args: &[&str]) -> io::Result<Self> {
        Ok(RedisServer {
            child: None,
            port: 0,
            dir: private_dir("redis")?,
            extra_args: extra_args.iter().map(|arg| arg.to_string()).collect(),
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
        let program =
            std::env::var_os("REDLEASE_REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
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
/// let files = redlease::testing::TlsFiles::generate().expect("openssl on PATH");
/// let pem = std::fs::read(files.ca_certificate()).unwrap();
/// assert!(pem.starts_with(b"-----BEGIN CERTIFICATE-----"));
/// ```
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
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
        let output = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|err| {
                io::Error::new(
                    err.kind(),
                    format!("cannot run openssl (install it: scripts/ensure-redis.sh): {err}"),
                )
            })?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "openssl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(())
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
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
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
    /// use redlease::testing::{RedisServer, TlsFiles, TlsServerOptions};
    ///
    /// let files = TlsFiles::generate().expect("openssl on PATH");
    /// let redis = RedisServer::start_tls(&files, &TlsServerOptions::default()).unwrap();
    /// assert!(redis.url().starts_with("rediss://localhost:"));
    /// assert!(redis.command(&["PING"]).unwrap().starts_with("+PONG"));
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn start_tls(files: &TlsFiles, options: &TlsServerOptions) -> io::Result<Self> {
        let server = RedisServer {
            child: None,
            port: 0,
            dir: private_dir("redis")?,
            extra_args: options.extra_args.clone(),
            tls: Some(ServerTls::new(files, options)?),
        };
        server.start_on_a_free_port()
    }

    /// Starts `count` TLS-only servers like [`start_tls`](Self::start_tls), all at once.
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
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
