//! A small pool of command connections to one Redis server.
//!
//! Every connection is made with the connect timeout and carries the response timeout as its
//! socket read and write timeout, so no command waits unbounded. A connection that saw an I/O
//! error or a timeout is dropped, never reused: its stream may hold a late answer. No thread
//! of its own; connections are made on demand by the calling thread and kept idle up to a
//! bound.
//!
//! A plaintext connection to a host name is made to the addresses the manager's [`Resolver`]
//! looks up within the connect timeout. A TLS connection cannot be: redis-rs checks the
//! server's certificate against the host it connects to, so it must be given the name, and it
//! looks the name up itself (`getaddrinfo`, unbounded). The resolver first confirms within the
//! connect timeout that the name answers now (see [`Resolver::confirm`]); what remains
//! unbounded is redis-rs's own lookup right after, which the system resolver usually answers
//! at once. An IP host is never looked up, and is what the certificate is checked against.
//!
//! The TLS handshake is part of connecting: redis-rs does it with the first exchange on the
//! connection, so when it has nothing to set up (no `AUTH`, `HELLO` or `SELECT`) the pool
//! sends a `PING` within what is left of the connect timeout.
//!
//! With the `tls` feature, two failures of a new connection that look like an unreachable or
//! silent server are checked with one more connection, and only then, within the time the call
//! had anyway: a plaintext connection that the server ends without a byte of answer, against
//! a TLS client hello
//! ([`TlsFailure::ServerRequiresTls`](crate::TlsFailure::ServerRequiresTls)); a TLS connection
//! that gets no answer in time, against a plaintext `PING`
//! ([`TlsFailure::NotTls`](crate::TlsFailure::NotTls)).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{Connection, ConnectionAddr, ConnectionLike, RedisResult};

use crate::error::{Error, Result};
use crate::resolve::Resolver;

pub(crate) struct Pool {
    client: redis::Client,
    /// Looks up the host of a TCP address; `None` for a Unix socket.
    resolver: Option<Arc<Resolver>>,
    idle: Mutex<Vec<Connection>>,
    max_idle: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// How many replies redis-rs waits for while setting up a new connection (at least 1).
    setup_replies: u32,
    /// The connections speak TLS (`rediss://`).
    tls: bool,
    /// A TLS connection has nothing to set up, so its handshake waits for a first command:
    /// a `PING` sent while connecting.
    ping_to_handshake: bool,
}

impl Pool {
    pub(crate) fn new(
        client: redis::Client,
        resolver: Option<Arc<Resolver>>,
        connect_timeout: Duration,
        response_timeout: Duration,
        max_idle: usize,
    ) -> Self {
        let info = client.get_connection_info();
        let settings = info.redis_settings();
        let setup_replies =
            u32::from(settings.password().is_some() || settings.protocol().supports_resp3())
                + u32::from(settings.db() != 0);
        let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        Pool {
            setup_replies: setup_replies.max(1),
            tls,
            ping_to_handshake: tls && setup_replies == 0,
            client,
            resolver,
            idle: Mutex::new(Vec::new()),
            max_idle,
            connect_timeout,
            response_timeout,
        }
    }

    pub(crate) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Which server and database this pool talks to, to tell servers apart.
    pub(crate) fn server(&self) -> String {
        let info = self.client.get_connection_info();
        format!("{} db {}", info.addr(), info.redis_settings().db())
    }

    /// Runs `command` on a pooled connection with the configured response timeout (and, for
    /// a new connection, the connect timeout before it).
    ///
    /// When a connection that sat idle turns out to be dead (the server restarted or closed
    /// it), all idle connections are dropped and `command` runs once more on a fresh one.
    pub(crate) fn run<T>(
        &self,
        mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_within(self.response_timeout, None, |connection| {
            command(connection)
        })
    }

    /// Like [`Pool::run`], but all of it, a new connection included, before `deadline`.
    /// `command` must bound its own reads by the deadline when it reads several answers.
    pub(crate) fn run_before<T>(
        &self,
        deadline: Instant,
        command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        let budget = deadline.saturating_duration_since(Instant::now());
        if budget.is_zero() {
            return Err(Error::Timeout(budget));
        }
        self.run_within(budget, Some(deadline), command)
    }

    /// Runs `command` with `timeout` per answer, and no later than `deadline` when given.
    fn run_within<T>(
        &self,
        timeout: Duration,
        deadline: Option<Instant>,
        mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        let pooled = self.idle.lock().pop();
        if let Some(connection) = pooled {
            match self.run_on(connection, timeout, deadline, &mut command) {
                Err(err) if is_stale_connection(&err) => {
                    log::debug!("dropping idle redis connections after: {err}");
                    self.idle.lock().clear();
                }
                outcome => return outcome.map_err(|err| Error::from_redis(err, timeout)),
            }
        }
        let connect_timeout = match deadline {
            None => self.connect_timeout,
            // redis-rs gives the TCP connect and each reply of its set-up commands the whole
            // timeout: share what is left among them.
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(Error::Timeout(timeout));
                }
                self.connect_timeout.min(left / self.setup_replies)
            }
        };
        // What the call may take from here: a connection and an answer, or until its deadline.
        let give_up_at = deadline.unwrap_or_else(|| Instant::now() + connect_timeout + timeout);
        let connection = self
            .connect(connect_timeout)
            .map_err(|err| self.explain_fresh_failure(err, Stage::Connecting, give_up_at))?;
        self.run_on(connection, timeout, deadline, &mut command)
            .map_err(|err| {
                let err = Error::from_redis(err, timeout);
                self.explain_fresh_failure(err, Stage::FirstCommand, give_up_at)
            })
    }

    fn run_on<T>(
        &self,
        mut connection: Connection,
        timeout: Duration,
        deadline: Option<Instant>,
        command: &mut impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let timeout = match deadline {
            Some(deadline) => timeout.min(deadline.saturating_duration_since(Instant::now())),
            None => timeout,
        };
        if timeout.is_zero() {
            self.put_back(connection);
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no time left").into());
        }
        let custom_timeout = timeout != self.response_timeout || deadline.is_some();
        if custom_timeout {
            connection.set_read_timeout(Some(timeout))?;
        }
        let outcome = command(&mut connection);
        let reusable = match &outcome {
            Ok(_) => connection.is_open(),
            // The server answered: the stream is in step with our requests.
            Err(err) => !(err.is_io_error() || err.is_timeout()) && connection.is_open(),
        };
        if reusable
            && (!custom_timeout
                || (connection
                    .set_read_timeout(Some(self.response_timeout))
                    .is_ok()
                    && connection
                        .set_write_timeout(Some(self.response_timeout))
                        .is_ok()))
        {
            self.put_back(connection);
        }
        outcome
    }

    /// An idle connection, for a caller that sends and reads by itself (a fan-out over
    /// several servers). It may turn out to be dead. Give it back with [`Pool::give_back`]
    /// only when it is in step (every answer read).
    pub(crate) fn take_idle(&self) -> Option<Connection> {
        self.idle.lock().pop()
    }

    /// A new connection, made within `budget` (set-up replies included).
    pub(crate) fn connect_within(&self, budget: Duration) -> Result<Connection> {
        if budget.is_zero() {
            return Err(Error::Timeout(budget));
        }
        let give_up_at = Instant::now() + budget;
        self.connect(self.connect_timeout.min(budget / self.setup_replies))
            .map_err(|err| self.explain_fresh_failure(err, Stage::Connecting, give_up_at))
    }

    /// The error of a connection made for this call (not an idle one), told apart more
    /// finely where it can be, with one more connection to the server (with the `tls`
    /// feature, and only on these failures):
    /// - a plaintext connection that the server ended without a byte of answer, when a TLS
    ///   client hello to it is answered in TLS, is
    ///   [`TlsFailure::ServerRequiresTls`](crate::TlsFailure::ServerRequiresTls);
    /// - a TLS connection that got no answer in time while `Connecting` (its handshake),
    ///   when a plaintext `PING` to the server is answered, is
    ///   [`TlsFailure::NotTls`](crate::TlsFailure::NotTls) (a plaintext `redis-server` stays
    ///   silent through a handshake).
    ///
    /// The check gets the connect timeout at most, and never goes past `give_up_at`, the
    /// bound the call had anyway (a connect that timed out has not used its answer's time);
    /// without time left, `err` stands.
    pub(crate) fn explain_fresh_failure(
        &self,
        err: Error,
        stage: Stage,
        give_up_at: Instant,
    ) -> Error {
        #[cfg(feature = "tls")]
        {
            let give_up_at = give_up_at.min(Instant::now() + self.connect_timeout);
            let explained = match &err {
                Error::Unreachable(cause)
                    if !self.tls
                        && cause.is_connection_dropped()
                        && !cause.is_connection_refusal()
                        && !cause.is_timeout() =>
                {
                    self.probe(give_up_at, |address, host, left| {
                        crate::tls::speaks_tls(address, host, left).then(|| Error::Tls {
                            kind: crate::TlsFailure::ServerRequiresTls,
                            detail: format!(
                                "{address} ended a plaintext connection without answering \
                                 ({cause}) and answers a TLS client hello in TLS"
                            ),
                        })
                    })
                }
                Error::Timeout(waited) if self.tls && stage == Stage::Connecting => {
                    self.probe(give_up_at, |address, _, left| {
                        crate::tls::speaks_plaintext_redis(address, left).then(|| Error::Tls {
                            kind: crate::TlsFailure::NotTls,
                            detail: format!(
                                "{address} did not answer within {waited:?} over TLS, and \
                                 answers a plaintext PING"
                            ),
                        })
                    })
                }
                _ => None,
            };
            if let Some(explained) = explained {
                return explained;
            }
        }
        #[cfg(not(feature = "tls"))]
        let _ = (stage, give_up_at);
        err
    }

    /// Runs `check` on the server's addresses in turn, each with the time left before
    /// `give_up_at`, until one answers an error.
    #[cfg(feature = "tls")]
    fn probe(
        &self,
        give_up_at: Instant,
        check: impl Fn(SocketAddr, &str, Duration) -> Option<Error>,
    ) -> Option<Error> {
        let resolver = self.resolver.as_ref()?;
        let host = match self.client.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host,
            _ => return None,
        };
        let left = give_up_at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        for address in resolver.resolve(left).ok()? {
            let left = give_up_at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Some(err) = check(address, host, left) {
                return Some(err);
            }
        }
        None
    }

    /// Restores the pool's read timeout on `connection` and keeps it for reuse (its write
    /// timeout must not have been changed).
    pub(crate) fn give_back(&self, connection: Connection) {
        let restored = connection.set_read_timeout(Some(self.response_timeout));
        if restored.is_ok() && connection.is_open() {
            self.put_back(connection);
        }
    }

    fn put_back(&self, connection: Connection) {
        let mut idle = self.idle.lock();
        if idle.len() < self.max_idle {
            idle.push(connection);
        }
    }

    fn connect(&self, timeout: Duration) -> Result<Connection> {
        let connection = self.open(timeout)?;
        for outcome in [
            connection.set_read_timeout(Some(self.response_timeout)),
            connection.set_write_timeout(Some(self.response_timeout)),
        ] {
            outcome.map_err(|err| Error::from_redis(err, timeout))?;
        }
        Ok(connection)
    }

    /// A new connection, set up and, for TLS, past its handshake, within `timeout`.
    fn open(&self, timeout: Duration) -> Result<Connection> {
        let give_up_at = Instant::now() + timeout;
        let mut connection = match &self.resolver {
            Some(resolver) if self.tls => self.connect_by_name(resolver, timeout)?,
            Some(resolver) => self.connect_resolved(resolver, timeout)?,
            None => self
                .client
                .get_connection_with_timeout(timeout)
                .map_err(|err| Error::from_redis(err, timeout))?,
        };
        if self.ping_to_handshake {
            self.complete_handshake(&mut connection, give_up_at, timeout)?;
        }
        Ok(connection)
    }

    /// For TLS: confirms that the host name answers, within `timeout`, then lets redis-rs
    /// look it up again and connect with it, so that the certificate is checked against the
    /// name (see the module doc for what this leaves unbounded).
    fn connect_by_name(&self, resolver: &Resolver, timeout: Duration) -> Result<Connection> {
        let give_up_at = Instant::now() + timeout;
        resolver
            .confirm(timeout)
            .map_err(|err| err.into_error(timeout))?;
        let left = give_up_at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout(timeout));
        }
        self.client
            .get_connection_with_timeout(left)
            .map_err(|err| {
                if is_unreachable(&err) {
                    // The name may have moved (a failover): look it up again next time.
                    resolver.distrust_cache();
                }
                Error::from_redis(err, timeout)
            })
    }

    /// Completes the TLS handshake of a new connection with a `PING` before `give_up_at`, so
    /// that it counts against the connect timeout, not against a command's response timeout.
    fn complete_handshake(
        &self,
        connection: &mut Connection,
        give_up_at: Instant,
        timeout: Duration,
    ) -> Result<()> {
        let left = give_up_at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout(timeout));
        }
        for outcome in [
            connection.set_read_timeout(Some(left)),
            connection.set_write_timeout(Some(left)),
        ] {
            outcome.map_err(|err| Error::from_redis(err, timeout))?;
        }
        redis::cmd("PING")
            .query::<()>(connection)
            .map_err(|err| Error::from_redis(err, timeout))
    }

    /// Looks the host up and connects to its addresses in turn until one takes the
    /// connection. The lookup and the TCP connect share `timeout`; the set-up replies then
    /// get what redis-rs gives them, as for any connection.
    fn connect_resolved(&self, resolver: &Resolver, timeout: Duration) -> Result<Connection> {
        let give_up_at = Instant::now() + timeout;
        let addresses = resolver
            .resolve(timeout)
            .map_err(|err| err.into_error(timeout))?;
        let mut last_error = None;
        for address in addresses {
            let left = give_up_at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            // Every setting of the URL but the host, which is now an address.
            let info = self
                .client
                .get_connection_info()
                .clone()
                .set_addr(ConnectionAddr::Tcp(numeric_host(&address), address.port()));
            let outcome = redis::Client::open(info)
                .and_then(|client| client.get_connection_with_timeout(left));
            match outcome {
                Ok(connection) => return Ok(connection),
                // Another address may be reachable where this one is not.
                Err(err) if is_unreachable(&err) => {
                    log::debug!("cannot connect to {address}: {err}");
                    last_error = Some(err);
                }
                // The server answered (refused a password, say): so would its other addresses.
                Err(err) => return Err(Error::from_redis(err, timeout)),
            }
        }
        match last_error {
            Some(err) => {
                // The name may have moved (a failover): look it up again next time.
                resolver.distrust_cache();
                Err(Error::from_redis(err, timeout))
            }
            None => Err(Error::Timeout(timeout)),
        }
    }
}

/// Where a new connection failed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Connecting, the set-up and the TLS handshake included.
    Connecting,
    /// At the first command sent on it.
    FirstCommand,
}

/// The IP of `address` as redis-rs takes a host: a numeric host is never looked up. A
/// link-local IPv6 address keeps its scope (`fe80::1%2`), which `IpAddr` has no room for.
fn numeric_host(address: &SocketAddr) -> String {
    match address {
        SocketAddr::V6(v6) if v6.scope_id() != 0 => format!("{}%{}", v6.ip(), v6.scope_id()),
        _ => address.ip().to_string(),
    }
}

/// An error that says the server could not be reached, or not in time.
fn is_unreachable(err: &redis::RedisError) -> bool {
    err.is_timeout()
        || err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
}

/// An error that says the connection was dead before we used it, not that the server is slow.
pub(crate) fn is_stale_connection(err: &redis::RedisError) -> bool {
    !err.is_timeout() && (err.is_connection_dropped() || err.is_io_error())
}
