//! The one error type of the crate.
//!
//! Every fallible call returns [`Result<T>`](crate::Result); its [`Error`] has one variant per
//! situation a caller may want to handle differently. Redis client errors are sorted here, in
//! [`Error::from_redis`], into "could not reach Redis in time", "the TLS connection failed"
//! and "Redis answered with an error".

use std::fmt;
use std::time::Duration;

use redis::{ErrorKind, ServerErrorKind};

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

    /// Redis answered with an error (for example `WRONGTYPE` when the lock name is used by a
    /// key of another type, or `NOPERM`).
    #[error("redis answered with an error: {0}")]
    Redis(#[source] redis::RedisError),

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

    /// A lock over several servers got its quorum, but the servers answered so late that
    /// nothing of the lease was left (it was taken back): the lease is too short for these
    /// servers, or they were slow for a moment.
    #[error("lock {name:?} was taken after {elapsed:?}, too late for its lease")]
    LeaseSpent {
        /// The lock name (the names joined with `+` when they differ).
        name: String,
        /// How long the attempt took.
        elapsed: Duration,
    },

    /// A key of the primitive called `name` holds something it cannot use: a key of another
    /// Redis type (Redis answered `WRONGTYPE`), or a string that is not a count. Nothing was
    /// changed.
    #[error("{name:?} is taken by a redis key of another kind")]
    WrongType {
        /// The name of the primitive.
        name: String,
    },

    /// An argument is out of range: an empty lock name, a zero or too long duration, a zero
    /// permit count, a change that would leave a semaphore with fewer than no permits.
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
    /// [`Error::Timeout`], everything the server said becomes [`Error::Redis`].
    pub(crate) fn from_redis(err: redis::RedisError, timeout: Duration) -> Self {
        #[cfg(feature = "tls")]
        if let Some(tls) = crate::tls::failure_of_redis_error(&err) {
            return tls;
        }
        if err.is_timeout() {
            Error::Timeout(timeout)
        } else if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
            Error::Unreachable(err)
        } else {
            Error::Redis(err)
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

    /// True for the errors after which the same call may succeed later: Redis was
    /// unreachable or slow (for a lock over several servers, too many of them:
    /// [`Error::NoQuorum`], or so slow that the lease was spent: [`Error::LeaseSpent`]), or
    /// answered that it cannot serve now (`LOADING`, `BUSY`,
    /// `TRYAGAIN`, `MASTERDOWN`, `READONLY`, `CLUSTERDOWN`).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Unreachable(_)
            | Error::Timeout(_)
            | Error::NoQuorum { .. }
            | Error::LeaseSpent { .. } => true,
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
                ) || err.code() == Some("BUSY")
            }
            _ => false,
        }
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
    /// Someone freed the lock with [`Lock::force_unlock`](crate::Lock::force_unlock), and
    /// this manager heard the notice.
    ForceReleased,
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
