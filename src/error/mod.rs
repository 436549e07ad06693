//! The one error type of the crate.
//!
//! Every fallible call returns [`Result<T>`](crate::Result); its [`Error`] has one variant per
//! situation a caller may want to handle differently. Redis client errors are sorted here, in
//! [`Error::from_redis`], into "could not reach Redis in time", "the TLS connection failed",
//! "Redis refused the login", "Redis refused a permission" and "Redis answered with another
//! error". The ACL refusals are recognized by their code and wording, as Redis 7.0 and later
//! give them (see [`Permission`]); the subscribed connection, which redis-rs does not read,
//! hands its error replies to [`Error::from_reply`] to be sorted the same way.

use std::fmt;
use std::time::Duration;

use redis::{ErrorKind, ServerErrorKind, Value};

mod finding;
#[cfg(feature = "tls")]
mod tls_failure;

pub use finding::Finding;

#[cfg(feature = "tls")]
pub(crate) use tls_failure::failure_of_io_error;

/// Shorthand for `std::result::Result<T, redlease::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in `redlease`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis could not be reached: connection refused or reset, or the connection dropped.
    #[error("redis is unreachable: {0}")]
    Unreachable(#[source] redis::RedisError),

    /// Redis did not answer within the configured connect or response timeout.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),

    /// Redis answered with an error this enum has no variant of its own for (for example
    /// `WRONGTYPE` where the call cannot name the primitive, or a script that failed).
    #[error("redis answered with an error: {0}")]
    Redis(#[source] redis::RedisError),

    /// Redis refused the credentials: a wrong password, an unknown or disabled user
    /// (`WRONGPASS`), a password given where the server has none, or none given where it
    /// requires one (`NOAUTH`). Checked by [`build`](crate::LockManagerBuilder::build) on the
    /// command connections and on the pub/sub connection; a connection made later (after the
    /// password changed, say) fails the call that needed it the same way.
    #[error("redis refused to log in {}", user_phrase(.user))]
    AuthenticationFailed {
        /// The user of the connection settings; `None` for Redis's `default` user (no user
        /// given). The password is never part of the error.
        user: Option<String>,
    },

    /// The Redis user lacks an ACL permission a call needs (Redis answered `NOPERM`, or
    /// refused a command inside one of the crate's scripts); see
    /// [the permissions page](crate::guide::permissions) for the permissions of each
    /// primitive. It comes from
    /// [`build`](crate::LockManagerBuilder::build) when the user may not run `PING` or
    /// `SUBSCRIBE` (which every manager uses), and otherwise from the first call that needs
    /// the permission: an acquisition whose script the user may not run (`EVALSHA`) or
    /// whose keys are outside the user's key patterns, a release whose script may not
    /// publish, a wait whose release channel the user may not subscribe to. An acquisition
    /// refused this way took nothing. (Redis keeps what a script wrote before a refused
    /// command in it: a release refused at its `PUBLISH` has freed the lock, without waking
    /// its waiters.)
    #[error("the redis user may not {permission} (redis answered: {message})")]
    PermissionDenied {
        /// What Redis refused.
        permission: Permission,
        /// Redis's answer, as it gave it (`NOPERM this user has no permissions to run the
        /// 'evalsha' command`).
        message: String,
    },

    /// The calling thread does not hold the lock: it never took it, another thread or process
    /// holds it, or its lease ran out before the release.
    #[error("lock {name:?} is not held by the calling thread")]
    NotHeld {
        /// The lock name.
        name: String,
    },

    /// The lock was lost while a guard still held it (see [`LostReason`]).
    #[error("lock {name:?} was lost: {reason}")]
    LockLost {
        /// The lock name.
        name: String,
        /// Why the lock is known to be gone.
        reason: LostReason,
    },

    /// The calling thread holds a read lock of a read-write lock and asked for its write
    /// lock, which would wait for the thread's own read lock forever: release the read levels
    /// first (a writer may take read levels, a reader cannot upgrade).
    #[error(
        "lock {name:?}: the calling thread holds its read lock and cannot take the write lock"
    )]
    WriteWhileReading {
        /// The read-write lock name.
        name: String,
    },

    /// The calling thread holds this non-reentrant lock already and asked for it again
    /// (Redisson answers `IllegalMonitorStateException`): a second level would wait for the
    /// thread's own hold forever, so nothing is sent and nothing waits.
    #[error("lock {name:?} is non-reentrant and the calling thread holds it already")]
    AlreadyHeld {
        /// The lock name.
        name: String,
    },

    /// A fenced write was refused: the resource has already seen a higher fencing token, so
    /// the writer's lock was lost and someone else has taken it since (see
    /// [`FencedStore`](crate::FencedStore)).
    #[error("write to {key:?} refused: fencing token {token} is older than {highest}")]
    StaleToken {
        /// The key of the fenced resource.
        key: String,
        /// The token the write carried.
        token: u64,
        /// The highest token the resource has seen.
        highest: u64,
    },

    /// A lock over several servers could not reach enough of them: fewer than `required`
    /// of its `masters` answered.
    #[error("only {reachable} of {masters} redis servers answered, {required} are needed")]
    NoQuorum {
        /// How many servers answered.
        reachable: usize,
        /// How many must hold the lock.
        required: usize,
        /// How many servers the lock spans.
        masters: usize,
    },

    /// A hold has less time left for sure than the caller asked for
    /// ([`Guard::check_valid_for`](crate::Guard::check_valid_for)): it is still held, but it
    /// might not be by the end of the work the caller was about to start. Not transient: ask
    /// again after the next renewal, or do less.
    #[error("{name:?} is held for sure for {left:?} only, less than the {margin:?} asked for")]
    ValidityTooShort {
        /// The name of the primitive.
        name: String,
        /// How long the hold is certain for (its [`valid_for`](crate::Guard::valid_for)).
        left: Duration,
        /// The margin asked for.
        margin: Duration,
    },

    /// An acquisition was granted so late that nothing of its lease was left by the local
    /// clock, and it was given back: for a lock over several servers, once its quorum came
    /// that late; for any other lock or permit, [three grants in a row](crate::guide::guarantees)
    /// (a wait goes on after one). The lease is too short for these servers and the link to
    /// them, or they were slow for a while.
    #[error("{name:?} was granted after {elapsed:?}, too late for its lease")]
    LeaseSpent {
        /// The lock name (the names joined with `+` when they differ).
        name: String,
        /// How long the attempt took.
        elapsed: Duration,
    },

    /// With replica acknowledgements (by default, the replicas in sync with the master, see
    /// [`connected_replica_acks`](crate::LockManagerBuilder::connected_replica_acks); or
    /// [`replica_acks`](crate::LockManagerBuilder::replica_acks)): an acquisition (of a
    /// lock of any kind, a permit, semaphore permits, a member of a group lock) got what it
    /// asked for, but fewer than `required` replicas acknowledged it within the ack timeout,
    /// so a failover now could erase it and hand it to someone else. It was given back: the
    /// caller holds nothing. A blocking call tries again through it, as through an outage,
    /// until its deadline (without one, for up to the
    /// [`outage_grace`](crate::LockManagerBuilder::outage_grace)), then ends with it; a
    /// `try_lock` ends with it at once.
    ///
    /// For a [`FencedStore`](crate::FencedStore) write (`name` is its key), the write was
    /// made and stands on the master; a failover now may lose it.
    ///
    /// [Transient](Error::is_transient): a replica that lags, was paused or is catching up
    /// after a reconnection acknowledges again soon. One that fails every time means fewer
    /// replicas are attached than asked for (see `INFO replication` on the master), or they
    /// are too far away for the ack timeout.
    #[error(
        "{name:?}: only {acknowledged} of the {required} replicas asked for acknowledged the \
         write in time"
    )]
    NotReplicated {
        /// The name of the primitive (the key, for a fenced store).
        name: String,
        /// How many replicas acknowledged the write in time.
        acknowledged: u32,
        /// How many were asked for.
        required: u32,
    },

    /// With [`aof_acks`](crate::LockManagerBuilder::aof_acks): the write is not known to be
    /// in the append-only file (written and fsynced) on the master, when asked for, or on
    /// enough replicas, within the ack timeout. An acquisition is given back, as for
    /// [`Error::NotReplicated`]; other writes stand on the master.
    ///
    /// [Transient](Error::is_transient): a disk that was slow, or a replica that lagged,
    /// catches up soon. One that fails every time means the master or its replicas do not
    /// keep an append-only file (`appendonly no`), fsync too rarely for the ack timeout
    /// (`appendfsync`), or fewer replicas are attached than asked for.
    #[error(
        "{name:?}: the write is not on disk where asked within the ack timeout (the master's \
         append-only file: {}; replicas' append-only files: {acknowledged} of {required})",
        if *.on_master_disk { "yes" } else { "no" }
    )]
    NotPersisted {
        /// The name of the primitive (the key, for a fenced store).
        name: String,
        /// Whether the master fsynced it to its append-only file (true when not asked).
        on_master_disk: bool,
        /// How many replicas fsynced it in time.
        acknowledged: u32,
        /// How many were asked for.
        required: u32,
    },

    /// A guarded write ([`LockGuard::guarded_write`](crate::LockGuard::guarded_write),
    /// [`run_guarded`](crate::LockGuard::run_guarded)) ran while the hold was current, and
    /// Redis refused one of its writes (a key of another type, a value that is not an
    /// integer), or the caller's script failed. The `applied` writes before it stand: Redis
    /// does not roll a script back. (For a script, `applied` is 0: what its body wrote before
    /// failing is its own to tell.) The outcome is kept for the request, so the call is not
    /// run twice.
    #[error(
        "{name:?}: a guarded write was refused after {applied} writes went through: {message}"
    )]
    GuardedWriteFailed {
        /// The lock whose hold guarded the write.
        name: String,
        /// How many of the writes went through before the refused one.
        applied: usize,
        /// What Redis (or the script) answered.
        message: String,
    },

    /// The server lacks something the manager's settings need (found by
    /// [`build`](crate::LockManagerBuilder::build)): `feature` names the setting, `detail`
    /// what the server answered.
    #[error("{feature} is not supported by this server: {detail}")]
    Unsupported {
        /// The setting, such as `aof_acks (WAITAOF)`.
        feature: String,
        /// What the server answered.
        detail: String,
    },

    /// The servers' settings put locks at risk, found by
    /// [`build`](crate::LockManagerBuilder::build) with
    /// [`ServerCheck::Strict`](crate::ServerCheck::Strict): each finding says where, what it
    /// risks and how to fix it (see
    /// [`LockManager::check_server`](crate::LockManager::check_server)).
    #[error("the servers' settings put locks at risk: {}", findings_text(.findings))]
    UnsafeServer {
        /// What the check found.
        findings: Vec<Finding>,
    },

    /// A key of the primitive called `name` holds something it cannot use: a key of another
    /// Redis type (Redis answered `WRONGTYPE`), or a string that is not a count. Nothing was
    /// changed.
    #[error("{name:?} is taken by a redis key of another kind")]
    WrongType {
        /// The name of the primitive.
        name: String,
    },

    /// Sentinel mode: the sentinels that answered know no master by this name (`SENTINEL
    /// get-master-addr-by-name` answered nothing).
    #[error("the sentinels know no master called {name:?}")]
    UnknownMaster {
        /// The master's name, as given to the builder.
        name: String,
    },

    /// An argument is out of range: an empty lock name, a zero or too long duration, a lease
    /// shorter than 10 ms (no grant would arrive in time to hold it), a zero permit count, a
    /// change that would leave a semaphore with fewer than no permits.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The TLS connection to Redis could not be set up: `kind` tells why, for a caller to
    /// match on; `detail` is what the TLS library or the connection said. Not transient: the
    /// certificates, the URL or the server's TLS settings must change first.
    #[error("TLS connection to redis failed: {kind}: {detail}")]
    Tls {
        /// Why.
        kind: TlsFailure,
        /// What the TLS library (rustls) or the connection reported, for people.
        detail: String,
    },

    /// A call that changes state was sent, its answer never came, and the same request
    /// could not be sent again and answered within the
    /// [`outage_grace`](crate::LockManagerBuilder::outage_grace): it may or may not have
    /// taken effect (a count-down counted, permits given back, a lock freed). Not
    /// [transient](Error::is_transient): a new call is a new request, which would take effect
    /// a second time if the first did. Look at the state (`count`, `available_permits`,
    /// `is_locked`) once Redis answers again. Whatever a take left behind is given back by
    /// the manager in the background; see the guarantees in the crate documentation.
    #[error(
        "{name:?}: the outcome is unknown, the call may or may not have taken effect: {cause}"
    )]
    Indeterminate {
        /// The name of the primitive.
        name: String,
        /// The last error of the call.
        cause: Box<Error>,
    },

    /// The manager could not start one of its threads.
    #[error("cannot start a redlease thread: {0}")]
    ThreadSpawn(#[source] std::io::Error),

    /// The wait was cancelled through the [`CancelToken`](crate::CancelToken) its handle is
    /// bound to.
    #[error("the wait was cancelled")]
    Cancelled,

    /// The manager was shut down; no new locks can be taken through it.
    #[error("the lock manager has been shut down")]
    ShutDown,
}

impl Error {
    /// Sorts a Redis client error: I/O failures become [`Error::Unreachable`] or
    /// [`Error::Timeout`], what the server said is sorted by [`Error::from_server`].
    pub(crate) fn from_redis(err: redis::RedisError, timeout: Duration) -> Self {
        #[cfg(feature = "tls")]
        if let Some(tls) = tls_failure::failure_of_redis_error(&err) {
            return tls;
        }
        if err.is_timeout() {
            Error::Timeout(timeout)
        } else if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
            Error::Unreachable(err)
        } else {
            Error::from_server(err)
        }
    }

    /// Sorts what the server answered: a refused login becomes [`Error::AuthenticationFailed`]
    /// without a user (the caller, which knows the connection's user, names it with
    /// [`Error::for_user`]), a refused permission [`Error::PermissionDenied`], anything else
    /// [`Error::Redis`].
    pub(crate) fn from_server(err: redis::RedisError) -> Self {
        // redis-rs keeps no server text for a refused `AUTH` of a new connection.
        if err.kind() == ErrorKind::AuthenticationFailed {
            return Error::AuthenticationFailed { user: None };
        }
        let Some(code) = err.code() else {
            return Error::Redis(err);
        };
        let detail = err.detail().unwrap_or_default();
        if matches!(code, "WRONGPASS" | "NOAUTH") {
            return Error::AuthenticationFailed { user: None };
        }
        match Permission::refused_in(code, detail) {
            Some(permission) => Error::PermissionDenied {
                permission,
                message: format!("{code} {detail}").trim_end().to_owned(),
            },
            None => Error::Redis(err),
        }
    }

    /// Sorts an error reply read off the subscribed connection (`reply` is its line without
    /// the leading `-`), as redis-rs would have parsed it.
    pub(crate) fn from_reply(reply: &str) -> Self {
        let err = match redis::parse_redis_value(format!("-{reply}\r\n").as_bytes()) {
            Ok(Value::ServerError(err)) => err.into(),
            // A line with a CR or LF of its own: keep it whole.
            _ => redis::make_extension_error("ERR".to_owned(), Some(reply.to_owned())),
        };
        Error::from_server(err)
    }

    /// Names `user` (the user of the connection settings; `None` for the default user) in
    /// an [`Error::AuthenticationFailed`]; any other error stays as it is.
    pub(crate) fn for_user(self, user: Option<&str>) -> Self {
        match self {
            Error::AuthenticationFailed { .. } => Error::AuthenticationFailed {
                user: user.map(str::to_owned),
            },
            other => other,
        }
    }

    /// Turns Redis's `WRONGTYPE` answer about a key of the primitive called `name` into
    /// [`Error::WrongType`]; any other error stays as it is.
    pub(crate) fn about_keys_of(self, name: &str) -> Self {
        match &self {
            Error::Redis(err) if err.code() == Some("WRONGTYPE") => Error::WrongType {
                name: name.to_owned(),
            },
            _ => self,
        }
    }

    /// True for the errors that say Redis could not serve the call now (unreachable, slow,
    /// loading, busy, failing over), and so did not answer it: what waits ride out, and what a
    /// request is sent again through.
    pub(crate) fn is_outage(&self) -> bool {
        match self {
            Error::Unreachable(_) | Error::Timeout(_) => true,
            Error::Redis(_) => self.is_transient(),
            _ => false,
        }
    }

    /// True for a write that too few replicas (or disks) acknowledged in time:
    /// [`Error::NotReplicated`] or [`Error::NotPersisted`].
    pub(crate) fn is_ack_shortfall(&self) -> bool {
        matches!(
            self,
            Error::NotReplicated { .. } | Error::NotPersisted { .. }
        )
    }

    /// True for an outage in which a call may have run before its answer was lost: the
    /// connection broke or timed out after it was made (not a refused connection, nor an
    /// answer that the server cannot serve now).
    pub(crate) fn may_have_run(&self) -> bool {
        match self {
            Error::Unreachable(err) => !err.is_connection_refusal(),
            Error::Timeout(_) => true,
            _ => false,
        }
    }

    /// True for the errors after which the same call may succeed later: Redis was
    /// unreachable or slow (for a lock over several servers, too many of them:
    /// [`Error::NoQuorum`], or so slow that the lease was spent: [`Error::LeaseSpent`]), its
    /// replicas (or disks) did not acknowledge a write in time ([`Error::NotReplicated`],
    /// [`Error::NotPersisted`]), or it
    /// answered that it cannot serve now (`LOADING`, `BUSY`,
    /// `TRYAGAIN`, `MASTERDOWN`, `READONLY`, `CLUSTERDOWN`, or `UNBLOCKED`: a master demoted
    /// while the call waited for its replicas). Never for a refused login or
    /// permission: the same call is refused until the user's ACL changes.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Unreachable(_)
            | Error::Timeout(_)
            | Error::NoQuorum { .. }
            | Error::LeaseSpent { .. }
            | Error::NotReplicated { .. }
            | Error::NotPersisted { .. } => true,
            Error::Redis(err) => {
                matches!(
                    err.kind(),
                    ErrorKind::Server(
                        ServerErrorKind::BusyLoading
                            | ServerErrorKind::TryAgain
                            | ServerErrorKind::MasterDown
                            | ServerErrorKind::ReadOnly
                            | ServerErrorKind::ClusterDown
                    )
                ) || matches!(err.code(), Some("BUSY" | "UNBLOCKED"))
            }
            _ => false,
        }
    }
}

/// What the Redis user was refused, in an [`Error::PermissionDenied`]: the ACL rule to add.
///
/// Read from the wording of Redis's answer: Redis 7.0 names the command it refused, but not
/// the key or channel, nor the command a script ran; Redis 7.2 and later name all of them.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let rules = ["ACL", "SETUSER", "reports", "on", ">secret", "~*", "&*", "+@all", "-evalsha"];
/// # assert!(redis.command(&rules).expect("ACL SETUSER").starts_with("+OK"));
/// # let url = format!("redis://reports:secret@127.0.0.1:{}/", redis.port());
/// use redlease::{Error, Permission};
///
/// // A user whose ACL lacks `+evalsha`: the manager builds, the first lock is refused.
/// let manager = redlease::LockManager::builder(url).build()?;
/// match manager.lock("reports:daily").try_lock() {
///     Err(Error::PermissionDenied {
///         permission: Permission::Command(command),
///         ..
///     }) => assert_eq!(command, "evalsha"),
///     other => panic!("{:?}", other.map(|guard| guard.is_some())),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Permission {
    /// Running this command, as ACL rules name it (`evalsha`, `script|load`, `subscribe`, or
    /// a command one of the crate's scripts runs: `hset`, `pexpire`...).
    Command(String),
    /// Running a command one of the crate's scripts runs, which Redis 7.0 does not name (the
    /// [permissions page](crate::guide::permissions) lists them for each primitive).
    ScriptCommand,
    /// Access to a key: the one Redis named (7.2 and later), or `None`, one of the keys of the
    /// call (the primitive's name or one of the keys derived from it, its release channel
    /// included: the scripts take it as a key).
    Key(Option<String>),
    /// A channel: the one Redis named (7.2 and later), or `None`, one of the channels of the
    /// call (a subscription to a release channel, or a script that publishes on one).
    Channel(Option<String>),
    /// A refusal worded in a way this version does not know: see the message.
    Other,
}

/// How Redis 7.2 and later begin a refusal inside a script: `ERR ACL failure in script:`
/// and then the words of a `NOPERM` answer.
const SCRIPT_ACL_FAILURE: &str = "acl failure in script:";
/// How Redis 7.0 begins a refusal inside a script, with the code `ERR`.
const SCRIPT_USER_REFUSED: &str = "the user executing the script can't";

impl Permission {
    /// What an error reply with this `code` and `detail` refused; `None` when it is no ACL
    /// refusal.
    fn refused_in(code: &str, detail: &str) -> Option<Permission> {
        // ASCII lowercasing keeps every byte where it was, so names are cut from `detail`
        // itself, in their own case.
        let lower = detail.to_ascii_lowercase();
        let skip = match code {
            "NOPERM" => 0,
            "ERR" if lower.starts_with(SCRIPT_ACL_FAILURE) => SCRIPT_ACL_FAILURE.len(),
            "ERR" if lower.starts_with(SCRIPT_USER_REFUSED) => 0,
            _ => return None,
        };
        let (text, lower) = (&detail[skip..], &lower[skip..]);
        let named = |what: &str| between(text, lower, "to access the '", &format!("' {what}"));
        Some(
            if let Some(command) = between(text, lower, "to run the '", "' command") {
                Permission::Command(command.to_owned())
            } else if lower.contains("can't run this command") {
                Permission::ScriptCommand
            } else if let Some(key) = named("key") {
                Permission::Key(Some(key.to_owned()))
            } else if let Some(channel) = named("channel") {
                Permission::Channel(Some(channel.to_owned()))
            } else if lower.contains(" key") {
                Permission::Key(None)
            } else if lower.contains(" channel") {
                Permission::Channel(None)
            } else {
                Permission::Other
            },
        )
    }
}

/// The part of `text` between `opening` and the last `closing` after it, found in `lower`
/// (`text` lowercased, byte for byte).
fn between<'a>(text: &'a str, lower: &str, opening: &str, closing: &str) -> Option<&'a str> {
    let begin = lower.find(opening)? + opening.len();
    let end = begin + lower[begin..].rfind(closing)?;
    text.get(begin..end)
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Permission::Command(command) => write!(f, "run the '{command}' command"),
            Permission::ScriptCommand => f.write_str("run a command one of the scripts runs"),
            Permission::Key(Some(key)) => write!(f, "access the key '{key}'"),
            Permission::Key(None) => f.write_str("access one of the keys of the call"),
            Permission::Channel(Some(channel)) => write!(f, "use the channel '{channel}'"),
            Permission::Channel(None) => f.write_str("use one of the channels of the call"),
            Permission::Other => f.write_str("do what the call asked"),
        }
    }
}

/// The user an [`Error::AuthenticationFailed`] names, as its message says it.
fn user_phrase(user: &Option<String>) -> String {
    match user {
        Some(user) => {
            format!("user {user:?} (wrong or missing password, or unknown or disabled user)")
        }
        None => "the default user (wrong or missing password)".to_owned(),
    }
}

/// Why a TLS connection to Redis failed (see [`Error::Tls`]).
///
/// Every kind but [`ServerRequiresTls`](TlsFailure::ServerRequiresTls) concerns a `rediss://`
/// URL; all of them need the `tls` feature (on by default) to be told apart. A failure of
/// another kind (a session that breaks after it was set up) stays [`Error::Unreachable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
// The links to the TLS builder options, which only the `tls` feature has.
#[cfg_attr(not(feature = "tls"), allow(rustdoc::broken_intra_doc_links))]
pub enum TlsFailure {
    /// The server's certificate does not chain to a trusted root: neither to the CA given
    /// with [`tls_ca_certificate`](crate::LockManagerBuilder::tls_ca_certificate), nor, without
    /// it, to the system's roots. Also a self-signed server certificate.
    UnknownIssuer,
    /// The server's certificate chains to a trusted root but cannot be used: expired, not
    /// valid yet, revoked, badly signed or encoded, or not meant for a server.
    InvalidCertificate,
    /// The server's certificate is valid, but not for the host of the URL: neither its DNS
    /// names nor its IP addresses (subject alternative names) include it.
    HostNameMismatch,
    /// A `rediss://` URL, and the server does not speak TLS on that port. Either it answered
    /// the TLS client hello with bytes that are not a TLS record, or it did not answer it
    /// within the connect timeout and then answered a plaintext `PING` on a new connection in
    /// the Redis protocol. A plaintext `redis-server` does the latter: its parser of inline
    /// commands waits for a line end that the hello never completes (a zero byte comes
    /// first), so it stays silent, and this failure takes the connect timeout to tell.
    NotTls,
    /// A `redis://` URL (plaintext), and the server speaks TLS only: it ended the connection
    /// without a byte of answer to the first command (a plaintext client of a TLS-only
    /// `redis-server` sees its connection reset), and a TLS client hello sent to the same
    /// address right after was answered with a TLS record. Use a `rediss://` URL.
    ServerRequiresTls,
    /// The server requires a client certificate and none was given (it sent the TLS alert
    /// `certificate_required`): see
    /// [`tls_client_certificate`](crate::LockManagerBuilder::tls_client_certificate).
    ClientCertificateRequired,
    /// The server did not accept the client certificate that was given: it sent one of the
    /// TLS alerts about certificates (`bad_certificate`, `unknown_ca`, `certificate_expired`,
    /// `access_denied`...). Typically a certificate not signed by a CA the server trusts.
    ClientCertificateRejected,
    /// The server refused the handshake for another reason: it sent a TLS alert such as
    /// `handshake_failure` or `protocol_version` (no TLS version or cipher suite in common).
    /// Over TLS 1.2, `handshake_failure` is also how a server that requires a client
    /// certificate answers a client without one.
    HandshakeRefused,
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFailure::UnknownIssuer => "the server's certificate is not signed by a trusted CA",
            TlsFailure::InvalidCertificate => "the server's certificate is not valid",
            TlsFailure::HostNameMismatch => {
                "the server's certificate is not valid for the host name of the URL"
            }
            TlsFailure::NotTls => "the server does not speak TLS on this port",
            TlsFailure::ServerRequiresTls => "the server speaks TLS only: use a rediss:// URL",
            TlsFailure::ClientCertificateRequired => "the server requires a client certificate",
            TlsFailure::ClientCertificateRejected => {
                "the server did not accept the client certificate"
            }
            TlsFailure::HandshakeRefused => "the server refused the TLS handshake",
        })
    }
}

/// Why a held lock is known to be gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// A renewal found the key gone or held by another holder: it expired, Redis lost its
    /// data (a restart without persistence, a failover), or something deleted it.
    NotHeldAnymore,
    /// The lease ran out by the local monotonic clock before a renewal succeeded: Redis was
    /// unreachable, slow or busy, or this process was paused past the lease. For a lock
    /// taken with a fixed lease: the lease ran out while the guard still lived.
    LeaseExpired,
    /// Someone freed the lock with [`Lock::break_lock`](crate::Lock::break_lock), and
    /// this manager heard the notice.
    ForceReleased,
}

/// Why a held lock is at risk: a renewal of it failed while its lease may still hold. The
/// watchdog keeps trying until the lease deadline; a renewal that succeeds clears the risk,
/// and none by the deadline makes it lost ([`LostReason::LeaseExpired`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RiskReason {
    /// Redis could not be reached: connection refused or reset.
    Unreachable,
    /// Redis did not answer the renewal within the response timeout: it is slow, busy,
    /// paused, or the network is.
    Unanswered,
    /// Redis answered as a server that is not the master of the lock's key (a replica, a
    /// cluster node the key's slot moved away from, or no master known yet): a failover or
    /// a slot migration is in progress.
    Failover,
    /// Redis answered the renewal with another error (out of memory, a permission taken
    /// away, a script error).
    Refused,
}

impl RiskReason {
    /// What a renewal that failed with `err` says of the risk to its holds.
    pub(crate) fn of_error(err: &Error) -> RiskReason {
        match err {
            Error::Unreachable(_) => RiskReason::Unreachable,
            Error::Timeout(_) => RiskReason::Unanswered,
            Error::UnknownMaster { .. } => RiskReason::Failover,
            Error::Redis(err) => RiskReason::of_kind(err.kind()),
            _ => RiskReason::Refused,
        }
    }

    /// What a renewal that Redis answered with an error of `kind` says of the risk.
    pub(crate) fn of_kind(kind: ErrorKind) -> RiskReason {
        match kind {
            ErrorKind::Server(
                ServerErrorKind::ReadOnly
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown,
            ) => RiskReason::Failover,
            ErrorKind::Io => RiskReason::Unreachable,
            _ => RiskReason::Refused,
        }
    }
}

impl fmt::Display for RiskReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RiskReason::Unreachable => "redis is unreachable",
            RiskReason::Unanswered => "redis did not answer the renewal in time",
            RiskReason::Failover => "redis answered as a server that is not the key's master",
            RiskReason::Refused => "redis refused the renewal",
        })
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::NotHeldAnymore => "redis no longer records this holder",
            LostReason::LeaseExpired => "the lease ran out before a renewal succeeded",
            LostReason::ForceReleased => "it was force-released",
        })
    }
}

/// The findings of a server check, one after another.
fn findings_text(findings: &[Finding]) -> String {
    let texts: Vec<String> = findings.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error redis-rs makes of the error reply `line`.
    fn reply(line: &str) -> Error {
        Error::from_reply(line)
    }

    fn denied(line: &str) -> Permission {
        match reply(line) {
            Error::PermissionDenied {
                permission,
                message,
            } => {
                assert_eq!(message, line);
                permission
            }
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn refusals_of_redis_7_0_are_sorted() {
        assert_eq!(
            denied("NOPERM this user has no permissions to run the 'evalsha' command"),
            Permission::Command("evalsha".into())
        );
        assert_eq!(
            denied("NOPERM this user has no permissions to run the 'script|load' command"),
            Permission::Command("script|load".into())
        );
        assert_eq!(
            denied(
                "NOPERM this user has no permissions to access one of the keys used as arguments"
            ),
            Permission::Key(None)
        );
        assert_eq!(
            denied(
                "NOPERM this user has no permissions to access one of the channels used as \
                 arguments"
            ),
            Permission::Channel(None)
        );
        assert_eq!(
            denied(
                "ERR The user executing the script can't run this command or subcommand script: \
                 66a66ab1013899c30b2f18634d6bf95e83230f61, on @user_script:1."
            ),
            Permission::ScriptCommand
        );
        assert_eq!(
            denied(
                "ERR The user executing the script can't publish to the channel mentioned in the \
                 command script: a32714a9592929be7a6ab4d4f40c48d672b800c5, on @user_script:1."
            ),
            Permission::Channel(None)
        );
        assert_eq!(
            denied(
                "ERR The user executing the script can't access at least one of the keys \
                 mentioned in the command script: a327, on @user_script:1."
            ),
            Permission::Key(None)
        );
    }

    #[test]
    fn refusals_of_later_redis_name_what_was_refused() {
        assert_eq!(
            denied("NOPERM User monkey has no permissions to run the 'evalsha' command"),
            Permission::Command("evalsha".into())
        );
        assert_eq!(
            denied("NOPERM User monkey has no permissions to access the 'Lock:{A}' key"),
            Permission::Key(Some("Lock:{A}".into()))
        );
        assert_eq!(
            denied("NOPERM User monkey has no permissions to access the 'it's' channel"),
            Permission::Channel(Some("it's".into()))
        );
        assert_eq!(
            denied(
                "ERR ACL failure in script: User monkey has no permissions to run the 'hset' \
                 command script: 66a6, on @user_script:1."
            ),
            Permission::Command("hset".into())
        );
        assert_eq!(
            denied("ERR ACL failure in script: No permissions to access a key script: 66a6"),
            Permission::Key(None)
        );
        assert_eq!(
            denied("NOPERM something new"),
            Permission::Other,
            "a NOPERM in other words is still a refusal"
        );
    }

    #[test]
    fn refused_logins_and_other_answers() {
        for line in [
            "WRONGPASS invalid username-password pair or user is disabled.",
            "NOAUTH Authentication required.",
        ] {
            assert!(
                matches!(reply(line), Error::AuthenticationFailed { user: None }),
                "{line}"
            );
        }
        let named = reply("NOAUTH Authentication required.").for_user(Some("bob"));
        assert!(
            matches!(&named, Error::AuthenticationFailed { user: Some(user) } if user == "bob")
        );
        assert!(!named.is_transient());

        let wrong_type = reply("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert!(matches!(&wrong_type, Error::Redis(err) if err.code() == Some("WRONGTYPE")));
        assert!(matches!(reply("ERR unknown command 'x'"), Error::Redis(_)));
        assert!(reply("LOADING Redis is loading the dataset in memory").is_transient());
        assert!(
            !reply("NOPERM this user has no permissions to run the 'ping' command").is_transient()
        );
    }
}
