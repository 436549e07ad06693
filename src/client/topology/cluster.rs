//! Cluster mode: which master of a Redis Cluster serves each of its 16 384 slots, one command
//! pool per node, and the redirections that keep the map true.
//!
//! [`Cluster::discover`] asks the seed nodes in turn for `CLUSTER SLOTS` and keeps the first
//! answer as the map. The map is asked for again, whole, by the thread that found it wrong,
//! at most every [`REFRESH_AT_MOST_EVERY`] and by one thread at a time, when:
//! - a node answered `MOVED` (the slot moved for good: the map takes the new owner of that
//!   slot at once, then asks for the rest);
//! - a node could not be reached, or answered `CLUSTERDOWN` or `READONLY` (a failover may be
//!   under way: the map names the promoted replica once the cluster has voted);
//! - the pub/sub service lost a subscription to the server (its slot left the node).
//!
//! An `ASK` answer (a slot in the middle of a migration) changes nothing here: the one call
//! is sent again to the node it names, after `ASKING` (see `crate::client::call::route`).
//!
//! Every node's pool is made on first use from the manager's settings at the node's address
//! (credentials, TLS: the certificate is checked against the address the cluster names), and
//! kept while the node is a master; its failed calls come back here through the pool's
//! failure hook. A master that a new map no longer names as one (a failover demoted it) has
//! its pool retired: a call that was blocked on it through the failover (a frozen master)
//! is not trusted, and no call goes there again; should the node serve slots again, it gets
//! a new pool. Asking goes to the masters the map knows, then to the seeds, each with the
//! connect timeout and the response timeout up to [`MAP_ANSWER_WITHIN`]. Uses the pool, the
//! resolver and the slot rule of the protocol.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, ServerErrorKind, Value};

use crate::client::topology::pool::{Pool, PoolSizes, PoolTimeouts, Reading, Target};
use crate::client::topology::resolve::{self, Resolver};
use crate::error::{Error, Result};
use crate::protocol::slot::SLOTS;

/// The map is asked for again at most this often.
pub(crate) const REFRESH_AT_MOST_EVERY: Duration = Duration::from_millis(100);

/// How long one node may take to answer `CLUSTER SLOTS` at most (less with a shorter
/// response timeout), before the next is asked.
const MAP_ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// A cluster node's address as the cluster names it (`CLUSTER SLOTS`, `MOVED`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct NodeAddress {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl NodeAddress {
    /// The address of a redirection: `host:port` (an IPv6 host without brackets).
    pub(crate) fn parse(text: &str) -> Option<NodeAddress> {
        let (host, port) = text.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Some(NodeAddress {
            host: host.to_owned(),
            port: port.parse().ok()?,
        })
    }
}

impl fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Which master serves each slot.
#[derive(PartialEq, Eq)]
struct SlotMap {
    /// Per slot, its master's index in `masters`, or [`NO_OWNER`].
    owners: Vec<u16>,
    masters: Vec<NodeAddress>,
}

const NO_OWNER: u16 = u16::MAX;

impl SlotMap {
    fn owner_of(&self, slot: u16) -> Option<&NodeAddress> {
        let index = *self.owners.get(usize::from(slot))?;
        self.masters.get(usize::from(index))
    }

    /// The map with `slot` served by `master`.
    fn with_owner(&self, slot: u16, master: &NodeAddress) -> SlotMap {
        let mut masters = self.masters.clone();
        let index = match masters.iter().position(|known| known == master) {
            Some(index) => index,
            None => {
                masters.push(master.clone());
                masters.len() - 1
            }
        };
        let mut owners = self.owners.clone();
        owners[usize::from(slot)] = index as u16;
        SlotMap { owners, masters }
    }

    /// The map of a `CLUSTER SLOTS` answer of the node at `asked`; `None` for an answer that
    /// is not one or assigns no slot.
    fn parse(answer: &Value, asked: &NodeAddress) -> Option<SlotMap> {
        let Value::Array(ranges) = answer else {
            return None;
        };
        let mut map = SlotMap {
            owners: vec![NO_OWNER; usize::from(SLOTS)],
            masters: Vec::new(),
        };
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let [start, end, master, ..] = fields.as_slice() else {
                return None;
            };
            let (start, end) = (integer(start)?, integer(end)?);
            if start > end || end >= i64::from(SLOTS) || start < 0 {
                return None;
            }
            let master = node_of(master, asked)?;
            let index = match map.masters.iter().position(|known| *known == master) {
                Some(index) => index,
                None => {
                    map.masters.push(master);
                    map.masters.len() - 1
                }
            };
            for slot in start..=end {
                map.owners[slot as usize] = index as u16;
            }
        }
        (!map.masters.is_empty()).then_some(map)
    }
}

fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Int(number) => Some(*number),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

/// The address of a node entry of `CLUSTER SLOTS` (`[host, port, id, ...]`). A node that does
/// not know its own address answers `""` or `?` for it: it is the node asked.
fn node_of(entry: &Value, asked: &NodeAddress) -> Option<NodeAddress> {
    let Value::Array(fields) = entry else {
        return None;
    };
    let host = text(fields.first()?)?;
    let port = u16::try_from(integer(fields.get(1)?)?).ok()?;
    let host = match host.as_str() {
        "" | "?" => asked.host.clone(),
        _ => host,
    };
    Some(NodeAddress { host, port })
}

/// The slot map of a cluster and the pools of its nodes.
pub(crate) struct Cluster {
    seeds: Vec<NodeAddress>,
    /// The manager's settings (credentials, TLS), for every node at its own address.
    template: ConnectionInfo,
    timeouts: PoolTimeouts,
    /// Of each node's pool.
    sizes: PoolSizes,
    map: RwLock<Arc<SlotMap>>,
    pools: Mutex<HashMap<NodeAddress, Arc<Pool>>>,
    generation: AtomicU64,
    /// When the map was last asked for; held while it is asked for.
    asked_at: Mutex<Option<Instant>>,
    /// Found once, at discovery.
    sharded_pubsub: AtomicBool,
    /// For the pools' failure hooks, which must not keep the cluster alive.
    this: Weak<Cluster>,
}

impl Cluster {
    /// Asks the seeds for the slot map, in turn, until one answers, and finds out whether
    /// the masters publish on shard channels.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a seed, for a seed that is not a TCP address, or
    /// one whose node is not in cluster mode; otherwise the error of the last seed asked
    /// ([`Error::Unreachable`], [`Error::AuthenticationFailed`]...).
    pub(crate) fn discover(
        seeds: &[ConnectionInfo],
        template: ConnectionInfo,
        timeouts: PoolTimeouts,
        sizes: PoolSizes,
    ) -> Result<Arc<Cluster>> {
        let seeds = seeds
            .iter()
            .map(|seed| match seed.addr() {
                ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                    Ok(NodeAddress {
                        host: host.clone(),
                        port: *port,
                    })
                }
                other => Err(Error::InvalidArgument(format!(
                    "a cluster node is reached over TCP, and {other} is not a TCP address"
                ))),
            })
            .collect::<Result<Vec<_>>>()?;
        if seeds.is_empty() {
            return Err(Error::InvalidArgument(
                "cluster mode needs at least one node address".into(),
            ));
        }
        if template.redis_settings().db() != 0 {
            return Err(Error::InvalidArgument(
                "a Redis Cluster has only database 0".into(),
            ));
        }
        let cluster = Arc::new_cyclic(|this| Cluster {
            seeds,
            template,
            timeouts,
            sizes,
            map: RwLock::new(Arc::new(SlotMap {
                owners: vec![NO_OWNER; usize::from(SLOTS)],
                masters: Vec::new(),
            })),
            pools: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            asked_at: Mutex::new(None),
            sharded_pubsub: AtomicBool::new(false),
            this: this.clone(),
        });
        {
            // Held, so that a seed that fails does not make its pool's hook ask again.
            let mut asked_at = cluster.asked_at.lock();
            let map = cluster.ask_for_map(&cluster.seeds)?;
            let sharded = cluster.publishes_on_shard_channels(&map.masters)?;
            cluster.sharded_pubsub.store(sharded, Ordering::Release);
            *cluster.map.write() = Arc::new(map);
            *asked_at = Some(Instant::now());
        }
        Ok(cluster)
    }

    /// The first map one of `nodes` answers, in turn.
    fn ask_for_map(&self, nodes: &[NodeAddress]) -> Result<SlotMap> {
        let mut last_error = None;
        for node in nodes {
            // A frozen node must not hold the refresh for a whole (long) response timeout.
            let deadline = Instant::now() + self.timeouts.response.min(MAP_ANSWER_WITHIN);
            let answer = self.pool_at(node).run_before(deadline, |connection| {
                let map = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query::<Value>(connection)?;
                Ok((map, Reading::Complete))
            });
            match answer {
                Ok(answer) => match SlotMap::parse(&answer, node) {
                    Some(map) => return Ok(map),
                    None => {
                        last_error = Some(Error::InvalidArgument(format!(
                            "{node} answered CLUSTER SLOTS with no slot assigned: is the \
                             cluster created?"
                        )))
                    }
                },
                Err(Error::Redis(err)) if is_cluster_disabled(&err) => {
                    return Err(Error::InvalidArgument(format!(
                        "{node} is not a Redis Cluster node ({err}): build the manager with \
                         LockManager::builder"
                    )));
                }
                Err(err) => {
                    log::debug!("cluster node {node} did not answer CLUSTER SLOTS: {err}");
                    last_error = Some(err);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| {
            Error::InvalidArgument("cluster mode needs at least one node address".into())
        }))
    }

    /// Whether the masters know `SPUBLISH` (Redis 7). A server that does not answer, or an
    /// ACL that refuses `COMMAND`, leaves plain `PUBLISH`, which any cluster relays.
    fn publishes_on_shard_channels(&self, masters: &[NodeAddress]) -> Result<bool> {
        let Some(master) = masters.first() else {
            return Ok(false);
        };
        let answer = self.pool_at(master).run(|connection| {
            redis::cmd("COMMAND")
                .arg("INFO")
                .arg("SPUBLISH")
                .query::<Value>(connection)
        });
        Ok(match answer {
            Ok(Value::Array(entries)) => entries
                .first()
                .is_some_and(|entry| !matches!(entry, Value::Nil)),
            Ok(_) => false,
            Err(err @ Error::AuthenticationFailed { .. }) => return Err(err),
            Err(err) => {
                log::info!(
                    "cannot tell whether {master} knows SPUBLISH ({err}): waiters subscribe \
                     with plain SUBSCRIBE"
                );
                false
            }
        })
    }

    /// The master that serves `slot` as far as the map knows, if any does.
    pub(crate) fn owner_of(&self, slot: u16) -> Option<NodeAddress> {
        self.map.read().owner_of(slot).cloned()
    }

    /// The masters of the map now.
    pub(crate) fn masters(&self) -> Vec<NodeAddress> {
        self.map.read().masters.clone()
    }

    /// Grows with every change of the map.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether releases publish on shard channels (`SPUBLISH`, Redis 7) and waiters
    /// `SSUBSCRIBE`, rather than `PUBLISH`/`SUBSCRIBE` (Redis 6).
    pub(crate) fn sharded_pubsub(&self) -> bool {
        self.sharded_pubsub.load(Ordering::Acquire)
    }

    /// The manager's connection settings (credentials, TLS) at `address`.
    pub(crate) fn node_info(&self, address: &NodeAddress) -> ConnectionInfo {
        resolve::info_at(&self.template, address.host.clone(), address.port)
    }

    /// The pool of the master that serves `slot`; while no master is known for it (the
    /// cluster lost it), asks for the map and falls back on any master, whose answer
    /// (`CLUSTERDOWN`, `MOVED`) tells the caller what to do.
    pub(crate) fn pool_for_slot(&self, slot: u16) -> Arc<Pool> {
        if let Some(owner) = self.owner_of(slot) {
            return self.pool_at(&owner);
        }
        self.refresh_soon();
        let fallback = self
            .owner_of(slot)
            .or_else(|| self.masters().into_iter().next())
            .unwrap_or_else(|| self.seeds[0].clone());
        self.pool_at(&fallback)
    }

    /// The pool of the node at `address`, made on first use.
    pub(crate) fn pool_at(&self, address: &NodeAddress) -> Arc<Pool> {
        let mut pools = self.pools.lock();
        if let Some(pool) = pools.get(address) {
            return Arc::clone(pool);
        }
        let info = self.node_info(address);
        let pool = Arc::new(self.new_pool(info, address));
        pools.insert(address.clone(), Arc::clone(&pool));
        pool
    }

    fn new_pool(&self, info: ConnectionInfo, address: &NodeAddress) -> Pool {
        let this = self.this.clone();
        let target = match redis::Client::open(info) {
            Ok(client) => Target::Fixed {
                client,
                resolver: Some(Arc::new(Resolver::new(&address.host, address.port))),
            },
            // The template made a client already: its settings at another address do too.
            Err(err) => unreachable!("connection settings refused at {address}: {err}"),
        };
        Pool::new(target, self.timeouts, self.sizes).with_failure_hook(Box::new(move |err| {
            if let Some(cluster) = this.upgrade() {
                cluster.call_failed(err);
            }
        }))
    }

    /// The pools of the masters now, with their addresses.
    pub(crate) fn master_pools(&self) -> Vec<(NodeAddress, Arc<Pool>)> {
        self.masters()
            .into_iter()
            .map(|master| {
                let pool = self.pool_at(&master);
                (master, pool)
            })
            .collect()
    }

    /// A call to a node failed with `err`: the map may be wrong.
    pub(crate) fn call_failed(&self, err: &RedisError) {
        if err.kind() == ErrorKind::Server(ServerErrorKind::Moved) {
            if let Some((address, slot)) = err.redirect_node() {
                if let Some(address) = NodeAddress::parse(address) {
                    self.moved(slot, &address);
                }
            }
            return;
        }
        let topology_changed = matches!(
            err.kind(),
            ErrorKind::Server(
                ServerErrorKind::ClusterDown
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::MasterDown
            )
        );
        if topology_changed
            || err.is_timeout()
            || err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
        {
            self.refresh_soon();
        }
    }

    /// A node answered that `slot` is served by `master` now (`MOVED`): the map takes it at
    /// once, then is asked for whole (other slots may have moved with it).
    pub(crate) fn moved(&self, slot: u16, master: &NodeAddress) {
        {
            let mut map = self.map.write();
            if map.owner_of(slot) != Some(master) {
                *map = Arc::new(map.with_owner(slot, master));
                self.generation.fetch_add(1, Ordering::AcqRel);
            }
        }
        self.refresh_soon();
    }

    /// Asks the cluster for its map again, unless it was asked within
    /// [`REFRESH_AT_MOST_EVERY`] or is being asked now (by this thread too: a failure while
    /// asking comes back here through a pool's hook).
    pub(crate) fn refresh_soon(&self) {
        let Some(mut asked_at) = self.asked_at.try_lock() else {
            return;
        };
        if asked_at.is_some_and(|at| at.elapsed() < REFRESH_AT_MOST_EVERY) {
            return;
        }
        let mut nodes = self.masters();
        for seed in &self.seeds {
            if !nodes.contains(seed) {
                nodes.push(seed.clone());
            }
        }
        let answer = self.ask_for_map(&nodes);
        *asked_at = Some(Instant::now());
        drop(asked_at);
        match answer {
            Ok(map) => {
                let mut current = self.map.write();
                if **current != map {
                    log::debug!("cluster slot map changed: masters {:?}", map.masters);
                    let demoted: Vec<NodeAddress> = (current.masters.iter())
                        .filter(|master| !map.masters.contains(master))
                        .cloned()
                        .collect();
                    *current = Arc::new(map);
                    self.generation.fetch_add(1, Ordering::AcqRel);
                    drop(current);
                    self.retire(&demoted);
                }
            }
            Err(err) => log::debug!("no cluster node answered CLUSTER SLOTS: {err}"),
        }
    }

    /// The nodes at `addresses` are no longer masters: their connections are not used
    /// again, and an answer read on one from now on is not trusted (a call that was blocked
    /// on a frozen master through its failover).
    /// Should such a node serve slots again, it gets a new pool.
    fn retire(&self, addresses: &[NodeAddress]) {
        let mut pools = self.pools.lock();
        for address in addresses {
            if let Some(pool) = pools.remove(address) {
                log::debug!("cluster node {address} is no longer a master");
                pool.retire();
            }
        }
    }

    pub(crate) fn response_timeout(&self) -> Duration {
        self.timeouts.response
    }

    /// Which cluster this is, to tell managers apart: its seeds.
    pub(crate) fn describe(&self) -> String {
        let seeds: Vec<String> = self.seeds.iter().map(ToString::to_string).collect();
        format!("cluster {}", seeds.join(","))
    }
}

/// Whether a node refused `CLUSTER` because it does not run in cluster mode.
fn is_cluster_disabled(err: &RedisError) -> bool {
    err.detail()
        .is_some_and(|detail| detail.contains("cluster support disabled"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn a_cluster_slots_answer_maps_every_range_to_its_master() {
        let asked = NodeAddress::parse("127.0.0.1:7000").unwrap();
        let answer = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("", 7001)]),
        ]);
        let map = SlotMap::parse(&answer, &asked).unwrap();
        assert_eq!(map.owner_of(0).unwrap().to_string(), "127.0.0.1:7000");
        assert_eq!(map.owner_of(5460).unwrap().port, 7000);
        // A node that does not know its address is the one asked.
        assert_eq!(map.owner_of(5461).unwrap().to_string(), "127.0.0.1:7001");
        assert_eq!(map.masters.len(), 2);
        let moved = map.with_owner(9, &NodeAddress::parse("127.0.0.1:7002").unwrap());
        assert_eq!(moved.owner_of(9).unwrap().port, 7002);
        assert_eq!(moved.owner_of(10).unwrap().port, 7000);
    }

    #[test]
    fn answers_that_are_no_map_are_refused() {
        let asked = NodeAddress::parse("h:1").unwrap();
        assert!(SlotMap::parse(&Value::Array(vec![]), &asked).is_none());
        assert!(SlotMap::parse(&Value::Nil, &asked).is_none());
        let bad_range = Value::Array(vec![Value::Array(vec![
            Value::Int(10),
            Value::Int(16384),
            node("h", 1),
        ])]);
        assert!(SlotMap::parse(&bad_range, &asked).is_none());
    }

    #[test]
    fn redirection_addresses_parse_with_and_without_brackets() {
        let v4 = NodeAddress::parse("10.0.0.1:6379").unwrap();
        assert_eq!((v4.host.as_str(), v4.port), ("10.0.0.1", 6379));
        let v6 = NodeAddress::parse("::1:7000").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 7000));
        assert_eq!(v6.to_string(), "[::1]:7000");
        assert!(NodeAddress::parse("nohost").is_none());
    }
}
