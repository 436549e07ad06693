//! Replica acknowledgements: what a manager's writes wait for ([`AckSetting`]: by default
//! every replica the master has in sync at the moment, or a fixed count with
//! [`replica_acks`](crate::LockManagerBuilder::replica_acks)), and what the `WAIT` sent behind
//! a write answered.
//!
//! A master hands its writes to its replicas after answering them. Should it die before a
//! replica got a lock's key, a failover promotes a replica without it, and the lock is free
//! for a second holder while the first still believes it holds it. `WAIT replicas timeout`
//! answers how many replicas have acknowledged every earlier write of the connection, once
//! that many have or the timeout has passed. The runners in `crate::client::call::runner` (one call, or a
//! pipeline) and `crate::client::fanout` send it behind the write in the same round trip and read its
//! answer with [`ReplicaAcks::read_answer`]; each primitive decides what a shortfall
//! ([`Unreplicated`]) means for it: an acquisition is undone and the caller told
//! ([`Error::NotReplicated`]); a renewal or a release stands, and is counted and reported
//! through [`ShortfallLog`].
//!
//! `WAIT` makes a lost write unlikely, not impossible: a failover may still promote a replica
//! other than the ones that acknowledged, and an acknowledged write is in the replica's
//! memory, not on its disk. A manager built with
//! [`aof_acks`](crate::LockManagerBuilder::aof_acks) sends `WAITAOF local replicas timeout`
//! instead (Redis 7.2 and later, Valkey): the write is fsynced to the append-only file of
//! the master (when `local`) and of that many replicas. Its shortfall is
//! [`Error::NotPersisted`]; [`ReplicaAcks::probe`] tells at build whether a server has it.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{Cmd, Connection, ErrorKind, FromRedisValue, RedisError, Value};

use crate::client::topology::pool::{Pool, Reading};
use crate::client::topology::replicas::InSync;
use crate::error::{Error, Result};
use crate::protocol::names;

/// After its deadline, an answer that is already there is still read: answers read in request
/// order must not turn one slow server's delay into a shortfall for the others.
const GRACE_AFTER_DEADLINE: Duration = Duration::from_millis(1);

/// How often at most a write that stands without enough acknowledgements is warned of; those
/// in between go to the debug log and are counted into the next warning.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// What a manager's writes wait for: the builder's choice, resolved for each write's master
/// by [`AckSetting::for_pool`].
#[derive(Clone, Debug)]
pub(crate) enum AckSetting {
    /// As many replicas as [`replica_acks`](crate::LockManagerBuilder::replica_acks) or
    /// [`aof_acks`](crate::LockManagerBuilder::aof_acks) asked for, whatever the master has.
    Fixed(ReplicaAcks),
    /// Every replica the master has in sync at the moment
    /// ([`connected_replica_acks`](crate::LockManagerBuilder::connected_replica_acks)); none
    /// when it has none.
    Connected { timeout: Duration },
}

impl AckSetting {
    /// Replicas in sync with the master, waited for within `timeout`.
    pub(crate) fn connected(timeout: Duration) -> Result<Self> {
        names::lease_millis("replica ack timeout", timeout)?;
        Ok(AckSetting::Connected { timeout })
    }

    /// The acknowledgements a write to the master of `pool` waits for now, if any: in
    /// connected mode, as many as the master's count of replicas in sync last read (see
    /// `crate::client::topology::replicas`), never waiting for a read.
    pub(crate) fn for_pool(&self, pool: &Pool) -> Option<Cow<'_, ReplicaAcks>> {
        match self {
            AckSetting::Fixed(acks) => Some(Cow::Borrowed(acks)),
            AckSetting::Connected { timeout } => {
                let replicas = pool.replicas_in_sync();
                if replicas == 0 {
                    return None;
                }
                let acks = ReplicaAcks::new(replicas, *timeout).ok()?;
                Some(Cow::Owned(ReplicaAcks {
                    in_sync: Some(Arc::clone(pool.in_sync())),
                    ..acks
                }))
            }
        }
    }

    /// Whether a write to the master of `pool` waits for replicas now (what
    /// [`AckSetting::for_pool`] answers `Some` for, without building its `WAIT`).
    pub(crate) fn waits_at(&self, pool: &Pool) -> bool {
        match self {
            AckSetting::Fixed(_) => true,
            AckSetting::Connected { .. } => pool.replicas_in_sync() > 0,
        }
    }

    /// The fixed acknowledgements, the ones a master may have too few replicas for.
    pub(crate) fn fixed(&self) -> Option<&ReplicaAcks> {
        match self {
            AckSetting::Fixed(acks) => Some(acks),
            AckSetting::Connected { .. } => None,
        }
    }

    /// The most a write waits for its acknowledgements.
    pub(crate) fn timeout(&self) -> Duration {
        match self {
            AckSetting::Fixed(acks) => acks.timeout,
            AckSetting::Connected { timeout } => *timeout,
        }
    }
}

/// How many replicas must acknowledge a write, and how long to wait for them: the
/// arguments of the `WAIT` (or `WAITAOF`) sent behind it.
#[derive(Clone, Debug)]
pub(crate) struct ReplicaAcks {
    replicas: u32,
    timeout: Duration,
    /// `Some(local)` for `WAITAOF`: whether the master's own fsync is waited for too.
    aof_local: Option<bool>,
    /// `WAIT replicas timeout-in-ms` or `WAITAOF local replicas timeout-in-ms`, built once.
    wait: Cmd,
    /// In connected mode, the master's count of replicas in sync that `replicas` was taken
    /// from: forgotten when `WAIT` answers another count, so that it is read again at once.
    in_sync: Option<Arc<InSync>>,
}

impl ReplicaAcks {
    /// Checks the settings: at least one replica, and a timeout of at least 1 ms (rounded up
    /// to whole milliseconds, as `WAIT` takes it; `WAIT 1 0` would wait forever).
    pub(crate) fn new(replicas: u32, timeout: Duration) -> Result<Self> {
        if replicas == 0 {
            return Err(Error::InvalidArgument(
                "replica acknowledgements need at least one replica".into(),
            ));
        }
        let timeout_ms = names::lease_millis("replica ack timeout", timeout)?;
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(timeout_ms);
        Ok(ReplicaAcks {
            replicas,
            timeout,
            aof_local: None,
            wait,
            in_sync: None,
        })
    }

    /// `WAITAOF`: the master's fsync when `local`, and `replicas` replicas' (at least one of
    /// the two), within `timeout` (at least 1 ms, as for `WAIT`).
    pub(crate) fn aof(local: bool, replicas: u32, timeout: Duration) -> Result<Self> {
        if !local && replicas == 0 {
            return Err(Error::InvalidArgument(
                "append-only file acknowledgements need the master's fsync or at least one \
                 replica"
                    .into(),
            ));
        }
        let timeout_ms = names::lease_millis("append-only file ack timeout", timeout)?;
        let mut wait = redis::cmd("WAITAOF");
        wait.arg(u32::from(local)).arg(replicas).arg(timeout_ms);
        Ok(ReplicaAcks {
            replicas,
            timeout,
            aof_local: Some(local),
            wait,
            in_sync: None,
        })
    }

    /// Tells whether the server of `connection` can answer this manager's acknowledgement
    /// command: `WAIT` always can; `WAITAOF` needs Redis 7.2 or later (or Valkey), and with
    /// `local` an append-only file on the master. Sent once per master by `build`, on a
    /// connection that has written nothing, so the answer comes at once.
    pub(crate) fn probe(&self, connection: &mut Connection) -> Result<()> {
        let Some(local) = self.aof_local else {
            return Ok(());
        };
        let probe = redis::cmd("WAITAOF")
            .arg(u32::from(local))
            .arg(0)
            .arg(1)
            .query::<Value>(connection);
        match probe {
            Ok(_) => Ok(()),
            Err(err) if err.kind() == ErrorKind::Server(redis::ServerErrorKind::ResponseError) => {
                Err(Error::Unsupported {
                    feature: "aof_acks (WAITAOF, Redis 7.2 or later, or Valkey)".into(),
                    detail: err.detail().unwrap_or_default().to_owned(),
                })
            }
            Err(err) => Err(Error::from_redis(err, self.timeout)),
        }
    }

    /// How many replicas each write waits for.
    pub(crate) fn replicas(&self) -> u32 {
        self.replicas
    }

    /// The command's name, for reports.
    fn command_name(&self) -> &'static str {
        match self.aof_local {
            Some(_) => "WAITAOF",
            None => "WAIT",
        }
    }

    /// How long a write waits for its acknowledgements at most.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The `WAIT` to send behind a write.
    pub(crate) fn command(&self) -> &Cmd {
        &self.wait
    }

    /// Reads the answer of the `WAIT` sent behind a write, until `deadline` (or, past it, one
    /// that is already there), and tells whether the write is on enough replicas. `budget`
    /// is how long the write and its `WAIT` were given, for the report of an answer that did
    /// not come (which leaves the connection out of step).
    pub(crate) fn read_answer(
        &self,
        connection: &mut Connection,
        deadline: Instant,
        budget: Duration,
    ) -> (Judged, Reading) {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(GRACE_AFTER_DEADLINE);
        let answer = connection
            .set_read_timeout(Some(left))
            .and_then(|()| connection.recv_response());
        match answer {
            Ok(answer) => (self.judge(answer), Reading::Complete),
            Err(err) => {
                if let Some(in_sync) = &self.in_sync {
                    in_sync.forget();
                }
                let command = self.command_name();
                log::debug!("no answer to {command} within {budget:?}: {err}");
                let unanswered = Unreplicated::Unanswered { budget };
                (Judged::short(unanswered), Reading::AnswerLeft)
            }
        }
    }

    /// What `WAIT`'s (or `WAITAOF`'s) answer says of the write before it.
    fn judge(&self, answer: Value) -> Judged {
        if let Some(local) = self.aof_local {
            return self.judge_aof(local, answer);
        }
        if let Some(in_sync) = &self.in_sync {
            if answer != Value::Int(i64::from(self.replicas)) {
                in_sync.forget();
            }
        }
        match answer {
            Value::Int(count) => {
                let acknowledged = u32::try_from(count.max(0)).unwrap_or(u32::MAX);
                Judged {
                    acknowledged: Some(acknowledged),
                    unreplicated: (acknowledged < self.replicas).then_some(Unreplicated::Short {
                        acknowledged,
                        required: self.replicas,
                    }),
                }
            }
            Value::ServerError(err) => Judged::short(Unreplicated::Refused(err.into())),
            other => Judged::short(Unreplicated::Refused(RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "WAIT answered something other than a count",
                format!("{other:?}"),
            )))),
        }
    }
}

impl ReplicaAcks {
    /// What `WAITAOF`'s answer (the master's fsync count, 0 or 1, and the replicas') says.
    fn judge_aof(&self, local: bool, answer: Value) -> Judged {
        let counts = match &answer {
            Value::Array(counts) => match counts.as_slice() {
                [Value::Int(on_master), Value::Int(replicas)] => Some((*on_master, *replicas)),
                _ => None,
            },
            _ => None,
        };
        let Some((on_master, replicas)) = counts else {
            return Judged::short(match answer {
                Value::ServerError(err) => Unreplicated::Refused(err.into()),
                other => Unreplicated::Refused(RedisError::from((
                    ErrorKind::UnexpectedReturnType,
                    "WAITAOF answered something other than two counts",
                    format!("{other:?}"),
                ))),
            });
        };
        let acknowledged = u32::try_from(replicas.max(0)).unwrap_or(u32::MAX);
        let on_master_disk = !local || on_master >= 1;
        let short = !on_master_disk || acknowledged < self.replicas;
        Judged {
            acknowledged: Some(acknowledged),
            unreplicated: short.then_some(Unreplicated::NotOnDisk {
                on_master_disk,
                acknowledged,
                required: self.replicas,
            }),
        }
    }
}

/// What a `WAIT` answered of the write before it.
#[derive(Debug)]
pub(crate) struct Judged {
    /// How many replicas acknowledged it, when `WAIT` answered a count.
    pub(crate) acknowledged: Option<u32>,
    /// `None` when enough did.
    pub(crate) unreplicated: Option<Unreplicated>,
}

impl Judged {
    fn short(why: Unreplicated) -> Self {
        Judged {
            acknowledged: None,
            unreplicated: Some(why),
        }
    }
}

/// Why a write is not known to be on enough replicas.
#[derive(Debug)]
pub(crate) enum Unreplicated {
    /// Fewer replicas than required acknowledged it within the ack timeout.
    Short { acknowledged: u32, required: u32 },
    /// `WAITAOF`: the master (when asked) or too few replicas fsynced it in time.
    NotOnDisk {
        on_master_disk: bool,
        acknowledged: u32,
        required: u32,
    },
    /// `WAIT`'s answer did not come within `budget` of the write: the master is slow, or the
    /// reader had to stop (the watchdog, at a lease deadline).
    Unanswered { budget: Duration },
    /// The server refused `WAIT` (an ACL user without it), or answered it with something
    /// other than a count.
    Refused(RedisError),
}

impl Unreplicated {
    /// The error of an acquisition of `name` undone for this reason:
    /// [`Error::NotReplicated`], [`Error::Timeout`] when `WAIT` did not answer,
    /// [`Error::PermissionDenied`] when the user may not run it, or [`Error::Redis`] when the
    /// server refused it otherwise.
    pub(crate) fn into_error(self, name: &str) -> Error {
        match self {
            Unreplicated::Short {
                acknowledged,
                required,
            } => Error::NotReplicated {
                name: name.to_owned(),
                acknowledged,
                required,
            },
            Unreplicated::NotOnDisk {
                on_master_disk,
                acknowledged,
                required,
            } => Error::NotPersisted {
                name: name.to_owned(),
                on_master_disk,
                acknowledged,
                required,
            },
            Unreplicated::Unanswered { budget } => Error::Timeout(budget),
            Unreplicated::Refused(err) => Error::from_server(err),
        }
    }
}

impl fmt::Display for Unreplicated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreplicated::Short {
                acknowledged,
                required,
            } => write!(
                f,
                "{acknowledged} of {required} replicas acknowledged it in time"
            ),
            Unreplicated::NotOnDisk {
                on_master_disk,
                acknowledged,
                required,
            } => write!(
                f,
                "on the master's disk: {on_master_disk}; on {acknowledged} of {required} \
                 replicas' disks in time"
            ),
            Unreplicated::Unanswered { budget } => {
                write!(f, "the acknowledgement did not come within {budget:?}")
            }
            Unreplicated::Refused(err) => write!(f, "the acknowledgement was refused: {err}"),
        }
    }
}

/// A call's answer, and whether the write it made is known to be on enough replicas.
#[derive(Debug)]
pub(crate) struct Acked<T> {
    pub(crate) answer: T,
    /// `None` when enough replicas acknowledged, or when acknowledgements are off.
    pub(crate) unreplicated: Option<Unreplicated>,
    /// How many replicas acknowledged the write (`WAIT`'s count), when it was asked.
    pub(crate) acknowledged: Option<u32>,
}

impl<T> Acked<T> {
    /// An answer for which no acknowledgement was asked.
    pub(crate) fn unasked(answer: T) -> Self {
        Acked {
            answer,
            unreplicated: None,
            acknowledged: None,
        }
    }

    /// An answer, and what the `WAIT` behind it answered.
    pub(crate) fn judged(answer: T, judged: Judged) -> Self {
        Acked {
            answer,
            unreplicated: judged.unreplicated,
            acknowledged: judged.acknowledged,
        }
    }
}

impl Acked<Value> {
    /// The answer read as a `T`: the server's refusal of the call, sorted as any other
    /// ([`Error::PermissionDenied`] for an ACL's, else [`Error::Redis`]), or [`Error::Redis`]
    /// for an answer a `T` cannot be read from.
    pub(crate) fn read_as<T: FromRedisValue>(self) -> Result<Acked<T>> {
        let answer = match self.answer {
            Value::ServerError(err) => return Err(Error::from_server(err.into())),
            answer => T::from_redis_value(answer).map_err(|err| Error::Redis(err.into()))?,
        };
        Ok(Acked {
            answer,
            unreplicated: self.unreplicated,
            acknowledged: self.acknowledged,
        })
    }
}

/// Reports writes that stand without enough acknowledgements (renewals, releases): a warning
/// at most once per [`WARN_EVERY`], with how many such writes there were since the last one;
/// each of them in the debug log.
pub(crate) struct ShortfallLog {
    state: Mutex<Warned>,
}

struct Warned {
    last: Option<Instant>,
    /// Writes short of acknowledgements since the last warning.
    since: u64,
}

impl ShortfallLog {
    pub(crate) fn new() -> Self {
        ShortfallLog {
            state: Mutex::new(Warned {
                last: None,
                since: 0,
            }),
        }
    }

    /// `writes` writes, described by `what`, stand without enough acknowledgements because
    /// of `why`.
    pub(crate) fn report(&self, writes: u64, what: fmt::Arguments<'_>, why: &Unreplicated) {
        let now = Instant::now();
        let mut state = self.state.lock();
        state.since += writes;
        let due = state
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= WARN_EVERY);
        if !due {
            drop(state);
            log::debug!("{what} not replicated: {why}");
            return;
        }
        let since = std::mem::take(&mut state.since);
        state.last = Some(now);
        drop(state);
        log::warn!(
            "{what} not replicated: {why}; it stands, and a failover now may undo it \
             ({since} such writes since the last warning)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        assert!(ReplicaAcks::new(0, Duration::from_millis(10)).is_err());
        assert!(ReplicaAcks::new(1, Duration::ZERO).is_err());
        let acks = ReplicaAcks::new(2, Duration::from_micros(1500)).unwrap();
        // Whole milliseconds, rounded up: never `WAIT 2 0`, which waits forever.
        let args: Vec<_> = acks.command().args_iter().collect();
        assert_eq!(args.len(), 3);
        assert_eq!(
            format!("{:?}", args[2]),
            format!("{:?}", redis::Arg::Simple(&b"2"[..]))
        );
    }

    #[test]
    fn answers_are_judged_against_the_count_required() {
        let acks = ReplicaAcks::new(2, Duration::from_millis(10)).unwrap();
        assert!(acks.judge(Value::Int(2)).unreplicated.is_none());
        assert_eq!(acks.judge(Value::Int(3)).acknowledged, Some(3));
        match acks.judge(Value::Int(1)).unreplicated {
            Some(Unreplicated::Short {
                acknowledged: 1,
                required: 2,
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            acks.judge(Value::Nil).unreplicated,
            Some(Unreplicated::Refused(_))
        ));
        let short = acks
            .judge(Value::Int(0))
            .unreplicated
            .unwrap()
            .into_error("payments");
        assert!(matches!(
            short,
            Error::NotReplicated { ref name, acknowledged: 0, required: 2 } if name == "payments"
        ));
        assert!(short.is_transient());
    }
}
