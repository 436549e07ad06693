//! A small pool of command connections to one Redis server.
//!
//! Every connection is made with the connect timeout and carries the response timeout as its
//! socket read and write timeout, so no command waits unbounded. A connection that saw an I/O
//! error or a timeout is dropped, never reused: its stream may hold a late answer; so is one
//! whose command gave up on an answer on purpose (a `WAIT` that only reports). No thread
//! of its own; connections are made on demand by the calling thread and kept idle up to a
//! bound. The connections open at once, idle and in use, have a bound too: a call that finds
//! them all in use waits for one to come back or close, within its connect timeout (or its
//! deadline), and fails with [`Error::Timeout`] if none does.
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
//!
//! In sentinel mode the pool connects to the master the [`MasterLocator`] names now, and
//! confirms with `ROLE` that the server it reached is a master. A call that cannot reach the
//! master, or that the master refuses with `READONLY` (it was demoted), makes the locator
//! ask the sentinels again.
//!
//! Every connection carries the generation of the topology it was made for: in sentinel
//! mode the locator's, which moves with every change of master; otherwise the pool's own,
//! which moves when the pool is [retired](Pool::retire) (in cluster mode, its node stopped
//! being a master: a retired pool makes no connection again, and refuses every call as an
//! unreachable server would). A connection of an older generation is never used again: it
//! is dropped when it comes back to the pool, and an answer read on it after the generation
//! moved (a call that was blocked on a frozen master through a failover) is not trusted: the
//! server that gave it may have been demoted, and what it wrote may be lost. Such a call
//! fails as an outage that may have run ([`Error::Unreachable`]), which every caller rides
//! out by sending it again to the master now (every call that changes state is safe to send
//! twice).

use std::io;
use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::{
    Connection, ConnectionAddr, ConnectionInfo, ConnectionLike, ErrorKind, RedisError, RedisResult,
    ServerErrorKind, Value,
};

use crate::client::topology::replicas::InSync;
use crate::client::topology::resolve::Resolver;
use crate::client::topology::sentinel::MasterLocator;
use crate::error::{Error, Result};

/// Where the pool's connections go.
// One per pool, made once and never moved: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Target {
    /// One server at a fixed address, its host looked up through `resolver` (`None` for a
    /// Unix socket).
    Fixed {
        client: redis::Client,
        resolver: Option<Arc<Resolver>>,
    },
    /// The master the sentinels name now.
    Sentinel(Arc<MasterLocator>),
}

/// A pool's timeouts: for a new connection (set-up included), and for each answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolTimeouts {
    pub(crate) connect: Duration,
    pub(crate) response: Duration,
}

/// How many connections a pool keeps idle, and how many it may have open at once (idle and
/// in use).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolSizes {
    pub(crate) max_idle: usize,
    pub(crate) max_open: usize,
}

/// Told of every call of a pool that failed, before the error is sorted: in cluster mode,
/// the slot map, which a `MOVED` answer or an unreachable node calls into doubt.
pub(crate) type FailureHook = Box<dyn Fn(&redis::RedisError) + Send + Sync>;

/// Whether a command read every answer it asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reading {
    /// Every answer read: the connection may serve another command.
    Complete,
    /// An answer that only reports (`WAIT`'s) was given up on at its deadline, the command's
    /// outcome all the same: the connection is out of step and is dropped.
    AnswerLeft,
}

/// Who sets the timeouts of a connection while a command runs on it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Timeouts {
    /// The pool, once before: the response timeout, restored after only when it differed.
    Pool,
    /// The command itself, per answer: the pool restores its own after.
    Command,
}

pub(crate) struct Pool {
    target: Target,
    /// The user the connections log in as (`None`: Redis's default user).
    user: Option<String>,
    /// The connections speak TLS (`rediss://`).
    tls: bool,
    /// A TLS connection has nothing to set up, so its handshake waits for a first command:
    /// a `PING` sent while connecting.
    ping_to_handshake: bool,
    /// Idle connections.
    idle: Mutex<Vec<Pooled>>,
    /// How many connections made for the topology's current generation are open (idle or
    /// in use), against the most there may be: those made for an older one (a master that
    /// is not one any more) are not counted, so that calls stuck on a frozen old master do
    /// not keep calls to the new one waiting.
    open: Mutex<Arc<OpenCount>>,
    /// The most connections a generation may have open.
    max_open: usize,
    /// The generation of a pool with a fixed target: moves when it is retired.
    epoch: AtomicU64,
    /// The pool was retired: it serves no call any more.
    retired: AtomicBool,
    max_idle: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// How many replies redis-rs waits for while setting up a new connection (at least 1).
    setup_replies: u32,
    on_failure: Option<FailureHook>,
    /// The replicas its master has in sync, as last read.
    in_sync: Arc<InSync>,
}

/// A connection of the pool, the generation of the topology it was made for, and its place
/// among the pool's open connections (given back when it is dropped).
pub(crate) struct Pooled {
    connection: Connection,
    generation: u64,
    place: Place,
}

/// How many connections of a pool made for one generation of its topology are open, against
/// the most it may have.
struct OpenCount {
    generation: u64,
    open: Mutex<usize>,
    /// Told of every connection closed and every one made idle, and (all of them) when the
    /// generation moves on: a caller waiting for one may go on.
    changed: Condvar,
    most: usize,
}

/// How often a call waiting for a connection looks again whether the pool was retired or
/// its master moved, which nothing else may tell it.
const WAIT_LOOK_AGAIN: Duration = Duration::from_millis(100);

/// A place among a pool's open connections: taken before a connection is made, given back
/// when it is dropped (or when making it failed).
struct Place(Arc<OpenCount>);

impl Drop for Place {
    fn drop(&mut self) {
        let count = &*self.0;
        *count.open.lock() -= 1;
        count.changed.notify_one();
    }
}

/// What a call may run on: an idle connection, or a place to make a new one.
enum Available {
    Idle(Pooled),
    Place(Place),
}

impl Deref for Pooled {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.connection
    }
}

impl DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.connection
    }
}

impl Pool {
    pub(crate) fn new(target: Target, timeouts: PoolTimeouts, sizes: PoolSizes) -> Self {
        let PoolTimeouts {
            connect: connect_timeout,
            response: response_timeout,
        } = timeouts;
        let info = match &target {
            Target::Fixed { client, .. } => client.get_connection_info().clone(),
            Target::Sentinel(locator) => locator.master_info(),
        };
        let settings = info.redis_settings();
        let setup_replies =
            u32::from(settings.password().is_some() || settings.protocol().supports_resp3())
                + u32::from(settings.db() != 0);
        let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        Pool {
            setup_replies: setup_replies.max(1),
            user: settings.username().map(str::to_owned),
            tls,
            ping_to_handshake: tls && setup_replies == 0,
            target,
            idle: Mutex::new(Vec::new()),
            open: Mutex::new(Arc::new(OpenCount {
                generation: 0,
                open: Mutex::new(0),
                changed: Condvar::new(),
                most: sizes.max_open.max(1),
            })),
            max_open: sizes.max_open.max(1),
            epoch: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            max_idle: sizes.max_idle,
            connect_timeout,
            response_timeout,
            on_failure: None,
            in_sync: Arc::default(),
        }
    }

    /// The pool, telling `hook` of every call that fails.
    pub(crate) fn with_failure_hook(mut self, hook: FailureHook) -> Self {
        self.on_failure = Some(hook);
        self
    }

    pub(crate) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// How many replicas the master has in sync, as last read (see [`InSync::count`]).
    pub(crate) fn replicas_in_sync(&self) -> u32 {
        self.in_sync.count()
    }

    /// Reads the count of [`Pool::replicas_in_sync`] again when it is due.
    pub(crate) fn recount_replicas_if_due(&self) {
        if self.in_sync.due(self.generation()) {
            self.in_sync.recount(self);
        }
    }

    /// The count of [`Pool::replicas_in_sync`], to forget when a `WAIT` answers another.
    pub(crate) fn in_sync(&self) -> &Arc<InSync> {
        &self.in_sync
    }

    /// Which server and database this pool talks to, to tell servers apart.
    pub(crate) fn server(&self) -> String {
        match &self.target {
            Target::Fixed { client, .. } => {
                let info = client.get_connection_info();
                format!("{} db {}", info.addr(), info.redis_settings().db())
            }
            Target::Sentinel(locator) => format!(
                "master {:?} db {}",
                locator.master_name(),
                locator.master_info().redis_settings().db()
            ),
        }
    }

    /// Runs `command` on a pooled connection with the configured response timeout (and, for
    /// a new connection, the connect timeout before it).
    ///
    /// When a connection that sat idle turns out to be dead (the server restarted or closed
    /// it), all idle connections are dropped and `command` runs once more on a fresh one.
    /// The first send may have reached the server before its connection broke: every call
    /// of the crate that changes state is safe to send twice (a request id its script checks,
    /// or a script that finds its own earlier run), which is what makes this resend safe.
    pub(crate) fn run<T>(
        &self,
        mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_within(self.response_timeout, None, Timeouts::Pool, |connection| {
            command(connection).map(|value| (value, Reading::Complete))
        })
        .map_err(|err| err.for_user(self.user()))
    }

    /// Like [`Pool::run`], for a command whose answers may take up to `budget` (a write and
    /// the `WAIT` behind it) and which sets its own read deadlines within it. It may give up
    /// on an answer that only reports and succeed all the same: it answers how it read, and a
    /// connection with an answer left unread is dropped.
    pub(crate) fn run_for<T>(
        &self,
        budget: Duration,
        command: impl FnMut(&mut Connection) -> RedisResult<(T, Reading)>,
    ) -> Result<T> {
        self.run_within(budget, None, Timeouts::Command, command)
            .map_err(|err| err.for_user(self.user()))
    }

    /// Like [`Pool::run_for`], but all of it, a new connection included, before `deadline`.
    /// `command` must bound its own reads by the deadline when it reads several answers.
    pub(crate) fn run_before<T>(
        &self,
        deadline: Instant,
        command: impl FnMut(&mut Connection) -> RedisResult<(T, Reading)>,
    ) -> Result<T> {
        let budget = deadline.saturating_duration_since(Instant::now());
        if budget.is_zero() {
            return Err(Error::Timeout(budget));
        }
        self.run_within(budget, Some(deadline), Timeouts::Command, command)
            .map_err(|err| err.for_user(self.user()))
    }

    /// Runs `command` with `timeout` per answer, and no later than `deadline` when given.
    fn run_within<T>(
        &self,
        timeout: Duration,
        deadline: Option<Instant>,
        timeouts: Timeouts,
        mut command: impl FnMut(&mut Connection) -> RedisResult<(T, Reading)>,
    ) -> Result<T> {
        self.refuse_if_retired()?;
        // A connection, idle or new, within the connect timeout (or the deadline): a call
        // waits for one while the pool has as many open as it may.
        let connected_by = match deadline {
            Some(deadline) => deadline.min(Instant::now() + self.connect_timeout),
            None => Instant::now() + self.connect_timeout,
        };
        let mut available = self.available(connected_by, true)?;
        if let Available::Idle(connection) = available {
            match self.run_on(connection, timeout, deadline, timeouts, &mut command) {
                Err(err) if is_stale_connection(&err) => {
                    log::debug!("dropping idle redis connections after: {err}");
                    self.forget_idle();
                    self.failed(&err);
                }
                outcome => return self.sorted(outcome, timeout),
            }
            // A fresh connection: the idle ones may all be dead.
            available = self.available(connected_by, false)?;
        }
        let Available::Place(place) = available else {
            unreachable!("only a place is asked for");
        };
        // redis-rs gives the TCP connect and each reply of its set-up commands the whole
        // timeout: share what is left among them.
        let left = connected_by.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout(timeout));
        }
        let connect_timeout = match deadline {
            None => left,
            Some(_) => left / self.setup_replies,
        };
        // A stale connection may have been stale because the pool was retired meanwhile.
        self.refuse_if_retired()?;
        // What the call may take from here: a connection and an answer, or until its deadline.
        let give_up_at = deadline.unwrap_or_else(|| Instant::now() + connect_timeout + timeout);
        let connection = self
            .connect(connect_timeout, place)
            .map_err(|err| self.explain_fresh_failure(err, Stage::Connecting, give_up_at))?;
        let outcome = self.run_on(connection, timeout, deadline, timeouts, &mut command);
        self.sorted(outcome, timeout)
            .map_err(|err| self.explain_fresh_failure(err, Stage::FirstCommand, give_up_at))
    }

    /// The crate's error for a failed call; in sentinel mode a call that did not reach the
    /// master, or that a demoted master refused, asks the sentinels again first.
    fn sorted<T>(&self, outcome: RedisResult<T>, timeout: Duration) -> Result<T> {
        outcome.map_err(|err| {
            self.failed(&err);
            Error::from_redis(err, timeout)
        })
    }

    /// Tells the master locator, in sentinel mode, or the failure hook, in cluster mode,
    /// about a call that failed with `err`.
    pub(crate) fn failed(&self, err: &redis::RedisError) {
        if let Some(hook) = &self.on_failure {
            hook(err);
        }
        let demoted = matches!(err.kind(), ErrorKind::Server(ServerErrorKind::ReadOnly));
        if demoted || is_unreachable(err) {
            self.master_in_doubt();
        }
    }

    /// In sentinel mode, asks the sentinels where the master is now (a call could not reach
    /// it, or it refused a write as a replica), and drops idle connections if it moved.
    pub(crate) fn master_in_doubt(&self) {
        if let Target::Sentinel(locator) = &self.target {
            if locator.ask_again() {
                self.forget_idle();
            }
        }
    }

    /// Drops every idle connection (the master moved, or one was found dead).
    pub(crate) fn forget_idle(&self) {
        // Dropped after the lock is let go: a connection dropped gives its place back, which
        // takes the count's lock (taken before the idle lock, never after).
        let forgotten = std::mem::take(&mut *self.idle.lock());
        drop(forgotten);
    }

    /// An idle connection (when `idle_too`), or a place to make a new one; waits for either
    /// until `give_up_at` while the pool has as many connections open as it may. A caller
    /// that wants a new connection while idle ones fill every place closes one of them.
    fn available(&self, give_up_at: Instant, idle_too: bool) -> Result<Available> {
        let started = Instant::now();
        loop {
            self.refuse_if_retired()?;
            // (Without the count's lock: taking an idle connection may drop stale ones, whose
            // places go back under that lock.)
            if idle_too {
                if let Some(connection) = self.take_idle() {
                    return Ok(Available::Idle(connection));
                }
            }
            let count = self.open_count();
            let mut open = count.open.lock();
            if *open < count.most {
                *open += 1;
                return Ok(Available::Place(Place(Arc::clone(&count))));
            }
            // One put back since the look above: take it, or close it for its place. (One
            // put back from now on tells this thread, which waits under the lock the teller
            // takes.)
            if !self.idle.lock().is_empty() {
                drop(open);
                if !idle_too {
                    self.close_one_idle();
                }
                continue;
            }
            let look_again = give_up_at.min(Instant::now() + WAIT_LOOK_AGAIN);
            let _ = count.changed.wait_until(&mut open, look_again);
            if Instant::now() >= give_up_at {
                drop(open);
                log::debug!(
                    "{}: all {} connections in use for {:?}",
                    self.server(),
                    count.most,
                    started.elapsed()
                );
                return Err(Error::Timeout(
                    give_up_at.saturating_duration_since(started),
                ));
            }
        }
    }

    /// The count of the connections made for the topology's current generation; a new one
    /// when the generation moved on, whose waiters are told.
    fn open_count(&self) -> Arc<OpenCount> {
        let generation = self.generation();
        let mut current = self.open.lock();
        if current.generation >= generation {
            return Arc::clone(&current);
        }
        let fresh = Arc::new(OpenCount {
            generation,
            open: Mutex::new(0),
            changed: Condvar::new(),
            most: self.max_open,
        });
        let old = std::mem::replace(&mut *current, Arc::clone(&fresh));
        drop(current);
        let _open = old.open.lock();
        old.changed.notify_all();
        fresh
    }

    /// Closes one idle connection, for its place (outside the idle list's lock, as a place
    /// goes back under the count's).
    fn close_one_idle(&self) {
        let closed = self.idle.lock().pop();
        drop(closed);
    }

    /// The most connections the pool may have open to its server at once.
    pub(crate) fn max_open(&self) -> usize {
        self.max_open
    }

    /// The generation of the topology now: a connection made for another is not used again.
    pub(crate) fn generation(&self) -> u64 {
        match &self.target {
            Target::Sentinel(locator) => locator.generation(),
            Target::Fixed { .. } => self.epoch.load(Ordering::Acquire),
        }
    }

    /// The server is no longer what this pool was made for (in cluster mode, its node is no
    /// longer a master): its connections, idle or busy, are not used again, an answer read
    /// on one from now on is not trusted, and every later call is refused without being
    /// sent, as by a server that cannot be reached.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.forget_idle();
        // The calls waiting for a connection are told, and refused.
        self.open_count();
    }

    /// Refuses a call on a retired pool: nothing was sent.
    fn refuse_if_retired(&self) -> Result<()> {
        if !self.retired.load(Ordering::Acquire) {
            return Ok(());
        }
        let detail = format!("{} is no longer a master", self.server());
        let err = io::Error::new(io::ErrorKind::ConnectionRefused, detail);
        Err(Error::Unreachable(err.into()))
    }

    /// Whether `connection` was made for the topology now.
    fn is_current(&self, connection: &Pooled) -> bool {
        connection.generation == self.generation()
    }

    fn run_on<T>(
        &self,
        mut connection: Pooled,
        timeout: Duration,
        deadline: Option<Instant>,
        timeouts: Timeouts,
        command: &mut impl FnMut(&mut Connection) -> RedisResult<(T, Reading)>,
    ) -> RedisResult<T> {
        let timeout = match deadline {
            Some(deadline) => timeout.min(deadline.saturating_duration_since(Instant::now())),
            None => timeout,
        };
        if timeout.is_zero() {
            self.put_back(connection);
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no time left").into());
        }
        let custom_timeout =
            timeout != self.response_timeout || deadline.is_some() || timeouts == Timeouts::Command;
        if custom_timeout {
            connection.set_read_timeout(Some(timeout))?;
        }
        let outcome = command(&mut connection);
        let outcome = match self.is_current(&connection) {
            true => outcome,
            // Answered (or not) by a server that is not the master any more, or may not be.
            false => Err(self.answered_after_switch()),
        };
        let reusable = match &outcome {
            Ok((_, reading)) => *reading == Reading::Complete && connection.is_open(),
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
        outcome.map(|(value, _)| value)
    }

    /// The error of a call whose connection was made for an older topology: a broken
    /// connection, after which the call may have run.
    fn answered_after_switch(&self) -> RedisError {
        let detail = format!(
            "{} moved while a call to it was on the wire: its answer is not trusted",
            self.server()
        );
        io::Error::new(io::ErrorKind::ConnectionAborted, detail).into()
    }

    /// An idle connection, for a caller that sends and reads by itself (a fan-out over
    /// several servers). It may turn out to be dead. Give it back with [`Pool::give_back`]
    /// only when it is in step (every answer read).
    pub(crate) fn take_idle(&self) -> Option<Pooled> {
        let generation = self.generation();
        let mut idle = self.idle.lock();
        if idle
            .iter()
            .all(|connection| connection.generation == generation)
        {
            return idle.pop();
        }
        // Connections made for an older topology go (the master moved since), once the lock
        // is let go (see `forget_idle`).
        let (current, old): (Vec<Pooled>, Vec<Pooled>) = std::mem::take(&mut *idle)
            .into_iter()
            .partition(|connection| connection.generation == generation);
        *idle = current;
        let taken = idle.pop();
        drop(idle);
        drop(old);
        taken
    }

    /// Whether an answer read on `connection` can be trusted: the connection was made for
    /// the topology now. An answer that cannot is [`Error::Unreachable`], as for a call
    /// whose connection broke after it was sent.
    pub(crate) fn check_current(&self, connection: &Pooled) -> Result<()> {
        match self.is_current(connection) {
            true => Ok(()),
            false => Err(Error::Unreachable(self.answered_after_switch())),
        }
    }

    /// A new connection, made within `budget` (set-up replies included, and the wait for a
    /// place while the pool has as many connections open as it may).
    pub(crate) fn connect_within(&self, budget: Duration) -> Result<Pooled> {
        self.refuse_if_retired()?;
        if budget.is_zero() {
            return Err(Error::Timeout(budget));
        }
        let give_up_at = Instant::now() + budget;
        let Available::Place(place) = self.available(give_up_at, false)? else {
            unreachable!("only a place is asked for");
        };
        let left = give_up_at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout(budget));
        }
        self.connect(self.connect_timeout.min(left / self.setup_replies), place)
            .map_err(|err| self.explain_fresh_failure(err, Stage::Connecting, give_up_at))
            .map_err(|err| err.for_user(self.user()))
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
                        crate::client::topology::tls::speaks_tls(address, host, left).then(|| {
                            Error::Tls {
                                kind: crate::TlsFailure::ServerRequiresTls,
                                detail: format!(
                                    "{address} ended a plaintext connection without answering \
                                 ({cause}) and answers a TLS client hello in TLS"
                                ),
                            }
                        })
                    })
                }
                Error::Timeout(waited) if self.tls && stage == Stage::Connecting => {
                    self.probe(give_up_at, |address, _, left| {
                        crate::client::topology::tls::speaks_plaintext_redis(address, left).then(
                            || Error::Tls {
                                kind: crate::TlsFailure::NotTls,
                                detail: format!(
                                    "{address} did not answer within {waited:?} over TLS, and \
                                 answers a plaintext PING"
                                ),
                            },
                        )
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
        // In sentinel mode the address changes: no probe.
        let Target::Fixed {
            client,
            resolver: Some(resolver),
        } = &self.target
        else {
            return None;
        };
        let host = match client.get_connection_info().addr() {
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

    /// The user of the connection settings; `None` when they name none (Redis's default user).
    pub(crate) fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// Restores the pool's read timeout on `connection` and keeps it for reuse (its write
    /// timeout must not have been changed).
    pub(crate) fn give_back(&self, connection: Pooled) {
        let restored = connection.set_read_timeout(Some(self.response_timeout));
        if restored.is_ok() && connection.is_open() {
            self.put_back(connection);
        }
    }

    /// Keeps `connection` for reuse, unless it was made for an older topology or enough are
    /// idle (then it is closed); either way a call waiting for a connection may go on.
    fn put_back(&self, connection: Pooled) {
        let generation = self.generation();
        // The count its place is in, which a waiter for this connection waits on.
        let count = Arc::clone(&connection.place.0);
        let mut idle = self.idle.lock();
        let unkept = match connection.generation == generation && idle.len() < self.max_idle {
            true => {
                idle.push(connection);
                None
            }
            false => Some(connection),
        };
        drop(idle);
        match unkept {
            // Its place goes back, which tells a waiter.
            Some(connection) => drop(connection),
            None => {
                let _open = count.open.lock();
                count.changed.notify_one();
            }
        }
    }

    /// A new connection, within `timeout`, in the `place` taken for it.
    fn connect(&self, timeout: Duration, place: Place) -> Result<Pooled> {
        // Read before connecting: a switch while connecting leaves the connection stale.
        let generation = self.generation();
        let connection = match self.open(timeout) {
            Ok(connection) => connection,
            Err(err) => {
                // Its place goes back first: the hook may ask this pool's server.
                drop(place);
                if let (Some(hook), Error::Unreachable(_) | Error::Timeout(_)) =
                    (&self.on_failure, &err)
                {
                    // The node could not be reached: it may have failed over.
                    hook(&io::Error::from(io::ErrorKind::ConnectionRefused).into());
                }
                return Err(err);
            }
        };
        for outcome in [
            connection.set_read_timeout(Some(self.response_timeout)),
            connection.set_write_timeout(Some(self.response_timeout)),
        ] {
            outcome.map_err(|err| Error::from_redis(err, timeout))?;
        }
        Ok(Pooled {
            connection,
            generation,
            place,
        })
    }

    /// A new connection, set up and, for TLS, past its handshake, within `timeout`.
    fn open(&self, timeout: Duration) -> Result<Connection> {
        let give_up_at = Instant::now() + timeout;
        let mut connection = match &self.target {
            Target::Fixed {
                client,
                resolver: Some(resolver),
            } if self.tls => connect_by_name(client, resolver, timeout)?,
            Target::Fixed {
                client,
                resolver: Some(resolver),
            } => connect_resolved(client.get_connection_info(), resolver, timeout)?,
            Target::Fixed {
                client,
                resolver: None,
            } => client
                .get_connection_with_timeout(timeout)
                .map_err(|err| Error::from_redis(err, timeout))?,
            Target::Sentinel(locator) => self.connect_to_master(locator, timeout)?,
        };
        if self.ping_to_handshake {
            complete_handshake(&mut connection, give_up_at, timeout)?;
        }
        Ok(connection)
    }

    /// A new connection to the master the sentinels name now; when it cannot be reached,
    /// the sentinels are asked again for the next try.
    fn connect_to_master(&self, locator: &MasterLocator, timeout: Duration) -> Result<Connection> {
        let (host, port) = locator.address();
        let resolver = Resolver::new(&host, port);
        let info = locator.info_at(host, port);
        let give_up_at = Instant::now() + timeout;
        let connected = if self.tls {
            redis::Client::open(info)
                .map_err(|err| Error::from_redis(err, timeout))
                .and_then(|client| connect_by_name(&client, &resolver, timeout))
        } else {
            connect_resolved(&info, &resolver, timeout)
        };
        connected
            .and_then(|mut connection| {
                confirm_master(&mut connection, give_up_at, timeout)?;
                Ok(connection)
            })
            .inspect_err(|err| {
                let demoted = matches!(err, Error::Redis(err)
                    if err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly));
                let unreachable = matches!(err, Error::Unreachable(_) | Error::Timeout(_));
                if (demoted || unreachable) && locator.ask_again() {
                    self.forget_idle();
                }
            })
    }
}

/// Confirms with `ROLE`, before `give_up_at`, that a new connection reached a master: the
/// sentinels may name a server that has been demoted since (one sentinel lags behind the
/// others). A server that is not a master is refused as `READONLY` would refuse a write; a
/// user whose ACL refuses `ROLE` is taken at the sentinels' word.
fn confirm_master(
    connection: &mut Connection,
    give_up_at: Instant,
    timeout: Duration,
) -> Result<()> {
    let left = time_left(give_up_at, timeout)?;
    let role = connection
        .set_read_timeout(Some(left))
        .and_then(|()| redis::cmd("ROLE").query::<Value>(connection));
    let restored = connection.set_read_timeout(Some(timeout));
    let role = match role {
        Ok(role) => role,
        Err(err) if err.code() == Some("NOPERM") => {
            log::debug!("cannot confirm the master's role: {err}");
            return Ok(());
        }
        Err(err) => return Err(Error::from_redis(err, timeout)),
    };
    restored.map_err(|err| Error::from_redis(err, timeout))?;
    let named = match &role {
        Value::Array(fields) => match fields.first() {
            Some(Value::BulkString(role)) => String::from_utf8_lossy(role).into_owned(),
            Some(Value::SimpleString(role)) => role.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    if named == "master" {
        return Ok(());
    }
    Err(Error::Redis(RedisError::from((
        ErrorKind::Server(ServerErrorKind::ReadOnly),
        "the server the sentinels name as master is not one",
        format!("ROLE answered {named:?}"),
    ))))
}

/// For TLS: confirms that the host name answers, within `timeout`, then lets redis-rs look it
/// up again and connect with it, so that the certificate is checked against the name (see the
/// module doc for what this leaves unbounded).
fn connect_by_name(
    client: &redis::Client,
    resolver: &Resolver,
    timeout: Duration,
) -> Result<Connection> {
    let give_up_at = Instant::now() + timeout;
    resolver
        .confirm(timeout)
        .map_err(|err| err.into_error(timeout))?;
    let left = time_left(give_up_at, timeout)?;
    client.get_connection_with_timeout(left).map_err(|err| {
        if is_unreachable(&err) {
            // The name may have moved (a failover): look it up again next time.
            resolver.distrust_cache();
        }
        Error::from_redis(err, timeout)
    })
}

/// Completes the TLS handshake of a new connection with a `PING` before `give_up_at`, so that
/// it counts against the connect timeout, not against a command's response timeout.
fn complete_handshake(
    connection: &mut Connection,
    give_up_at: Instant,
    timeout: Duration,
) -> Result<()> {
    let left = time_left(give_up_at, timeout)?;
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

/// The time left before `give_up_at`, or [`Error::Timeout`] of `timeout` (the budget it was
/// counted from) once it has passed.
fn time_left(give_up_at: Instant, timeout: Duration) -> Result<Duration> {
    let left = give_up_at.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(Error::Timeout(timeout));
    }
    Ok(left)
}

/// Where a new connection failed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Connecting, the set-up and the TLS handshake included.
    Connecting,
    /// At the first command sent on it.
    FirstCommand,
}

/// Looks the host up and connects to its addresses in turn until one takes the connection,
/// with every setting of `info` but the host. The lookup and the TCP connect share `timeout`;
/// the set-up replies then get what redis-rs gives them, as for any connection.
fn connect_resolved(
    info: &ConnectionInfo,
    resolver: &Resolver,
    timeout: Duration,
) -> Result<Connection> {
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
        let info = info
            .clone()
            .set_addr(ConnectionAddr::Tcp(numeric_host(&address), address.port()));
        let outcome =
            redis::Client::open(info).and_then(|client| client.get_connection_with_timeout(left));
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
