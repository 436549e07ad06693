//! Where a key's calls go: the one pool of a single server (or of the master the sentinels
//! name), or in cluster mode the pool of the master that serves the key's slot, with the
//! cluster's redirections followed.
//!
//! A call routed by [`Router::route`] that a node answers with `MOVED` is sent again where
//! the answer says, and the slot map learns the move; one answered with `ASK` (its slot is
//! being migrated, and its key has left) is sent once to the node named, after `ASKING` on
//! the same connection. At most [`MAX_REDIRECTIONS`] moves in a row. A call whose keys a
//! migration has split between two nodes (`TRYAGAIN`) is sent again every [`TRY_AGAIN_AFTER`]
//! for up to the response timeout, and `ASK` is followed for as long. A single server that answers a
//! redirection is a cluster node that was given to the wrong builder: that is said as such.
//!
//! In cluster mode every key of one script call must share a slot, or the cluster refuses it
//! (`CROSSSLOT`): [`Router::check_slots`] says so before, in words that name the lock. And
//! releases publish on shard channels when the cluster has them: [`Router::dialect`] gives a
//! call the script's sharded dialect then. Uses the pool, the cluster map, the protocol's
//! slot rule and the script runner ([`Router::run_script`]).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Connection, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use crate::client::topology::cluster::{Cluster, NodeAddress};
use crate::client::topology::pool::Pool;
use crate::error::{Error, Result};
use crate::protocol::slot::key_slot;
use crate::protocol::ScriptCall;

/// How many `MOVED` answers one call follows before it fails with the last.
pub(crate) const MAX_REDIRECTIONS: usize = 5;

/// How long a call answered `TRYAGAIN` waits before it is sent again (for up to the response
/// timeout in all).
const TRY_AGAIN_AFTER: Duration = Duration::from_millis(20);

pub(crate) enum Router {
    /// A single server, or the master the sentinels name.
    Single(Arc<Pool>),
    Cluster(Arc<Cluster>),
}

/// What a try on one node came to.
pub(crate) enum Routed<T> {
    Done(T),
    /// The node answered that another serves the key.
    Redirected(Redirect),
}

/// A `MOVED` or `ASK` answer.
pub(crate) struct Redirect {
    /// `ASK`: this one call goes there, after `ASKING`.
    ask: bool,
    slot: u16,
    to: NodeAddress,
    error: RedisError,
}

impl Redirect {
    /// The redirection `err` is, if it is one.
    pub(crate) fn of_error(err: &RedisError) -> Option<Redirect> {
        let ask = match err.kind() {
            ErrorKind::Server(ServerErrorKind::Ask) => true,
            ErrorKind::Server(ServerErrorKind::Moved) => false,
            _ => return None,
        };
        let (address, slot) = err.redirect_node()?;
        Some(Redirect {
            ask,
            slot,
            to: NodeAddress::parse(address)?,
            error: err.clone(),
        })
    }

    /// The redirection an answer read off a pipeline is, if it is one.
    pub(crate) fn of_value(value: &Value) -> Option<Redirect> {
        match value {
            Value::ServerError(err) => Redirect::of_error(&RedisError::from(err.clone())),
            _ => None,
        }
    }

    /// The answer as an error, to tell the map.
    pub(crate) fn into_error(self) -> RedisError {
        self.error
    }

    /// `ASK`: the node the one call goes to.
    pub(crate) fn ask_target(&self) -> Option<&NodeAddress> {
        self.ask.then_some(&self.to)
    }
}

/// Runs `attempt` on the node of the cluster that serves `slot` until it is done, following
/// `MOVED` (at most [`MAX_REDIRECTIONS`] times) and `ASK`, and waiting out `TRYAGAIN`, both
/// only until `try_again_until` (a migration's). `None` (nothing answered at all) cannot
/// happen, as the loop ends only after a `MOVED`; the caller answers it with a timeout all
/// the same.
fn route_in_cluster<T>(
    cluster: &Cluster,
    slot: u16,
    try_again_until: Instant,
    mut attempt: impl FnMut(&Pool, bool) -> Result<Routed<T>>,
) -> Option<Result<T>> {
    let mut ask_at: Option<NodeAddress> = None;
    let mut last = None;
    let mut moves = 0;
    while moves <= MAX_REDIRECTIONS {
        let (pool, asking) = match ask_at.take() {
            Some(node) => (cluster.pool_at(&node), true),
            None => (cluster.pool_for_slot(slot), false),
        };
        let tried = match attempt(&pool, asking) {
            // The slot is being migrated and the call's keys are split between the two
            // nodes (`TRYAGAIN`): it runs once the keys have moved, or the slot has.
            Err(Error::Redis(err))
                if err.kind() == ErrorKind::Server(ServerErrorKind::TryAgain)
                    && Instant::now() + TRY_AGAIN_AFTER < try_again_until =>
            {
                std::thread::sleep(TRY_AGAIN_AFTER);
                continue;
            }
            Err(err) => return Some(Err(err)),
            Ok(tried) => tried,
        };
        let redirect = match tried {
            Routed::Done(value) => return Some(Ok(value)),
            Routed::Redirected(redirect) => redirect,
        };
        if redirect.ask {
            // Only while the migration lasts, which `TRYAGAIN` bounds.
            if Instant::now() >= try_again_until {
                return Some(Err(Error::Redis(redirect.error)));
            }
            ask_at = Some(redirect.to.clone());
        } else {
            moves += 1;
            cluster.moved(redirect.slot, &redirect.to);
        }
        last = Some(redirect.error);
    }
    last.map(|err| Err(Error::Redis(err)))
}

/// `outcome`, with a redirection taken out of its error.
pub(crate) fn intercept<T>(outcome: RedisResult<T>) -> RedisResult<Routed<T>> {
    match outcome {
        Ok(value) => Ok(Routed::Done(value)),
        Err(err) => match Redirect::of_error(&err) {
            Some(redirect) => Ok(Routed::Redirected(redirect)),
            None => Err(err),
        },
    }
}

/// Sends `ASKING` on `connection` when `asking`: the next command may then touch a key of
/// a slot the node is importing.
pub(crate) fn ask_first(connection: &mut Connection, asking: bool) -> RedisResult<()> {
    if asking {
        redis::cmd("ASKING").query::<()>(connection)?;
    }
    Ok(())
}

impl Router {
    /// The pool that serves `key` as far as anyone knows now.
    pub(crate) fn pool_for(&self, key: &[u8]) -> Arc<Pool> {
        match self {
            Router::Single(pool) => Arc::clone(pool),
            Router::Cluster(cluster) => cluster.pool_for_slot(key_slot(key)),
        }
    }

    /// The cluster, in cluster mode.
    pub(crate) fn cluster(&self) -> Option<&Arc<Cluster>> {
        match self {
            Router::Single(_) => None,
            Router::Cluster(cluster) => Some(cluster),
        }
    }

    /// The pool of every master: the one, or each of the cluster's now.
    pub(crate) fn master_pools(&self) -> Vec<Arc<Pool>> {
        match self {
            Router::Single(pool) => vec![Arc::clone(pool)],
            Router::Cluster(cluster) => cluster
                .master_pools()
                .into_iter()
                .map(|(_, pool)| pool)
                .collect(),
        }
    }

    pub(crate) fn response_timeout(&self) -> Duration {
        match self {
            Router::Single(pool) => pool.response_timeout(),
            Router::Cluster(cluster) => cluster.response_timeout(),
        }
    }

    /// Which server answers for `key`, to tell the members of a group lock apart: a single
    /// server, or in cluster mode the cluster and the slot.
    pub(crate) fn server_of(&self, key: &str) -> String {
        match self {
            Router::Single(pool) => pool.server(),
            Router::Cluster(cluster) => {
                format!("{} slot {}", cluster.describe(), key_slot(key.as_bytes()))
            }
        }
    }

    /// Runs `attempt` on the pool that serves `key` (the pool, and whether to send `ASKING`
    /// first) until it is done, following what redirections it answers.
    pub(crate) fn route<T>(
        &self,
        key: &[u8],
        mut attempt: impl FnMut(&Pool, bool) -> Result<Routed<T>>,
    ) -> Result<T> {
        match self {
            Router::Single(pool) => match attempt(pool, false)? {
                Routed::Done(value) => Ok(value),
                Routed::Redirected(redirect) => Err(Error::InvalidArgument(format!(
                    "{} is a Redis Cluster node (it answered {}): build the manager with \
                     LockManager::builder_cluster",
                    pool.server(),
                    redirect.error
                ))),
            },
            Router::Cluster(cluster) => {
                let try_again_until = Instant::now() + self.response_timeout();
                route_in_cluster(cluster, key_slot(key), try_again_until, attempt)
                    .unwrap_or_else(|| Err(Error::Timeout(self.response_timeout())))
            }
        }
    }

    /// Runs one protocol call on the node that serves its keys, and answers its answer.
    pub(crate) fn run_script<T: redis::FromRedisValue>(&self, call: &ScriptCall) -> Result<T> {
        let call = &*self.prepare(call)?;
        let key = call.keys().next().unwrap_or_default();
        self.route(key, |pool, asking| {
            pool.run(|connection| {
                ask_first(connection, asking)?;
                intercept(crate::client::call::runner::run(connection, call))
            })
        })
    }

    /// In cluster mode, [`Error::InvalidArgument`] when the keys of `call` fall in different
    /// slots: a name with a `{` that opens no hash tag (`a{b`), whose derived keys
    /// (`prefix:a{b`) are hashed whole, unlike the name's own key.
    pub(crate) fn check_slots(&self, call: &ScriptCall) -> Result<()> {
        if let Router::Single(_) = self {
            return Ok(());
        }
        let mut keys = call.keys();
        let Some(first) = keys.next() else {
            return Ok(());
        };
        let slot = key_slot(first);
        match keys.find(|key| key_slot(key) != slot) {
            None => Ok(()),
            Some(other) => Err(Error::InvalidArgument(format!(
                "{:?} cannot be used on a Redis Cluster: its keys fall in different slots \
                 ({:?} in {slot}, {:?} in {}); a name with a brace must carry a whole hash \
                 tag, such as {{tenant}}:job",
                String::from_utf8_lossy(first),
                String::from_utf8_lossy(first),
                String::from_utf8_lossy(other),
                key_slot(other)
            ))),
        }
    }

    /// `call` checked ([`check_slots`](Router::check_slots)) and in the deployment's dialect
    /// ([`dialect`](Router::dialect)), with the key it is routed by.
    pub(crate) fn prepare<'a>(&self, call: &'a ScriptCall) -> Result<Cow<'a, ScriptCall>> {
        self.check_slots(call)?;
        Ok(self.dialect(call))
    }

    /// `call` in the dialect the deployment publishes releases in: the sharded one
    /// (`SPUBLISH`) on a cluster with shard channels, the plain one otherwise.
    pub(crate) fn dialect<'a>(&self, call: &'a ScriptCall) -> Cow<'a, ScriptCall> {
        match self {
            Router::Cluster(cluster) if cluster.sharded_pubsub() => Cow::Owned(call.sharded()),
            _ => Cow::Borrowed(call),
        }
    }
}
