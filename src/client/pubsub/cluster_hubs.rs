//! The cluster's hubs: one hub per master of a Redis Cluster (not one per channel), and
//! subscriptions that follow their channel's slot from master to master.
//!
//! A channel belongs on the master that serves its slot ([`key_slot`] of the channel name):
//! in sharded mode that is the only node that hears its `SPUBLISH`; in plain mode (Redis 6)
//! any node hears every `PUBLISH`, and the slot's master is just a way to spread the
//! channels. A master's hub is spawned when a channel of its slots is first waited on, and
//! the first master's at the start, which tells whether Redis refuses the login or the
//! `SUBSCRIBE` command (and fails the start, as on a single server). Every hub subscribes to
//! the notice channel, so every notice is heard by each of them (handling one twice is
//! harmless), and the manager hears notices as long as one hub stands.
//!
//! A subscription records the node it joined and the map's generation then. Before each
//! sleep the wait loop asks it to [follow](Route::follow) its slot, which costs two atomic
//! reads and the hub's lock while nothing changed. It moves (joins the slot's master now,
//! then leaves the old one) when the map names another master, when the node ended the
//! subscription on its own or answered `MOVED` (see [`super::channels`]), or, once the cluster is
//! asked for its map again, when its node cannot be reached: a failover, a migration.
//!
//! Hubs of nodes the map no longer lists as masters are stopped once no channel is left on
//! them, so a long-lived manager does not keep a thread, and its reconnection attempts, for
//! every node that ever left the cluster. They are stopped when the map is seen to change
//! (at a subscription), each time such a node cannot be reached (its listener tells), and,
//! for one that still had channels when the change was seen, when its last channel leaves
//! it (its last waiter, or its listener at the answer to the last `UNSUBSCRIBE`, tells);
//! their threads are joined as they end, and all at [`ClusterHubs::stop`]. Should no master be left
//! with a hub, the first master gets one, for the notices.
//!
//! Touches the hubs through their shared parts, and the cluster's map through
//! [`SlotOwners`]; no I/O of its own.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;
use redis::ConnectionInfo;

use super::channels::{Interest, Mode};
use super::hub::{Hub, HubSettings, Member, Shared, TroubleHook, UnusedHook};
use super::transport::connection::Endpoint;
use crate::client::topology::cluster::{Cluster, NodeAddress};
use crate::client::topology::tls::TlsConnector;
use crate::error::{Error, Result};
use crate::protocol::slot::key_slot;

/// What the cluster's hubs need of the cluster's map: the cluster itself, or in tests a map
/// they set.
pub(crate) trait SlotOwners: Send + Sync {
    /// The master that serves `slot` as far as the map knows, if any does.
    fn owner_of(&self, slot: u16) -> Option<NodeAddress>;
    /// The masters of the map now.
    fn masters(&self) -> Vec<NodeAddress>;
    /// Grows with every change of the map.
    fn generation(&self) -> u64;
    /// Asks the cluster for its map again soon (rate-limited by the map).
    fn refresh_soon(&self);
    /// The manager's connection settings (credentials, TLS) at `address`.
    fn node_info(&self, address: &NodeAddress) -> ConnectionInfo;
}

impl SlotOwners for Cluster {
    fn owner_of(&self, slot: u16) -> Option<NodeAddress> {
        Cluster::owner_of(self, slot)
    }

    fn masters(&self) -> Vec<NodeAddress> {
        Cluster::masters(self)
    }

    fn generation(&self) -> u64 {
        Cluster::generation(self)
    }

    fn refresh_soon(&self) {
        Cluster::refresh_soon(self);
    }

    fn node_info(&self, address: &NodeAddress) -> ConnectionInfo {
        Cluster::node_info(self, address)
    }
}

/// How many times a join looks its node's hub up again after finding it stopped (it was
/// stopped for leaving the map between the look-up and the join; a new one is spawned).
const JOIN_ATTEMPTS: usize = 3;

/// The hubs of one manager's cluster.
pub(super) struct ClusterHubs {
    owners: Arc<dyn SlotOwners>,
    settings: HubSettings,
    tls: Option<Arc<TlsConnector>>,
    hubs: Mutex<Hubs>,
    /// For the hook each hub's listener calls when its node cannot be reached.
    me: Weak<ClusterHubs>,
}

/// The hubs, under the lock of the cluster's hubs. (A hub's own lock may be taken under this one,
/// never the other way round.)
#[derive(Default)]
struct Hubs {
    by_node: HashMap<NodeAddress, Hub>,
    /// Hubs told to stop whose threads have not been joined yet.
    retired: Vec<Hub>,
    /// The reconnections of the hubs no longer in `by_node`.
    retired_reconnects: u64,
    /// The map's generation the hubs were last matched with.
    tended: u64,
    stopping: bool,
}

impl ClusterHubs {
    /// Starts the hub of the first master and waits (up to the connect timeout) for its
    /// first connection; fails as a single server's hub does when Redis refuses its login or
    /// the `SUBSCRIBE` command.
    pub(super) fn start(
        owners: Arc<dyn SlotOwners>,
        settings: HubSettings,
        tls: Option<TlsConnector>,
    ) -> Result<Arc<ClusterHubs>> {
        let tended = owners.generation();
        let nodes = Arc::new_cyclic(|me| ClusterHubs {
            owners,
            settings,
            tls: tls.map(Arc::new),
            hubs: Mutex::new(Hubs {
                tended,
                ..Hubs::default()
            }),
            me: me.clone(),
        });
        let Some(first) = nodes.owners.masters().into_iter().next() else {
            log::warn!("the cluster map lists no master: no pub/sub hub to start yet");
            return Ok(nodes);
        };
        let ready_by = Instant::now() + nodes.settings.connect_timeout;
        let unusable = match nodes.hub_at(&first) {
            Ok(hub) => hub.await_first_connection(ready_by),
            Err(err) => Some(err),
        };
        match unusable {
            Some(err) => {
                nodes.stop();
                Err(err)
            }
            None => Ok(nodes),
        }
    }

    /// Joins the waiters on `channel` at the master of its slot (see [`Shared::join`]), and
    /// answers the route by which the subscription follows its slot. While no master serves
    /// the slot, the subscription belongs to no hub (and polls) until one does.
    pub(super) fn subscribe(
        self: &Arc<Self>,
        channel: &str,
        interest: &Interest,
    ) -> Result<(Member, Route)> {
        let slot = key_slot(channel.as_bytes());
        let generation = self.owners.generation();
        self.tend(Some(generation));
        let node = self.owner_of(slot);
        let member = match &node {
            Some(node) => self.join(node, channel, interest)?,
            None => {
                self.owners.refresh_soon();
                Member::detached(channel, interest)
            }
        };
        let route = Route {
            nodes: Arc::clone(self),
            node,
            slot,
            generation,
            interest: interest.clone(),
        };
        Ok((member, route))
    }

    /// The node a channel of `slot` belongs on: its master; in plain mode, where every node
    /// hears every message, the first master while the slot has none.
    fn owner_of(&self, slot: u16) -> Option<NodeAddress> {
        self.owners
            .owner_of(slot)
            .or_else(|| match self.settings.mode {
                Mode::Plain => self.owners.masters().into_iter().next(),
                Mode::Sharded => None,
            })
    }

    /// Joins the waiters on `channel` at the hub of `node`, spawned if there is none, once
    /// its first attempt to connect has ended (up to the connect timeout).
    fn join(&self, node: &NodeAddress, channel: &str, interest: &Interest) -> Result<Member> {
        for _ in 0..JOIN_ATTEMPTS {
            let hub = self.hub_at(node)?;
            hub.await_first_attempt(Instant::now() + self.settings.connect_timeout);
            match hub.join(channel, interest) {
                // Stopped for leaving the map after it was looked up: look again.
                Err(Error::ShutDown) if !self.hubs.lock().stopping => {}
                joined => return joined,
            }
        }
        // The map keeps naming a node it does not list: poll until it settles.
        log::debug!("no pub/sub hub for {node} could be joined: {channel:?} polls");
        Ok(Member::detached(channel, interest))
    }

    /// The hub of the node at `address`, spawned if there is none.
    fn hub_at(&self, address: &NodeAddress) -> Result<Arc<Shared>> {
        let mut hubs = self.hubs.lock();
        if hubs.stopping {
            return Err(Error::ShutDown);
        }
        if let Some(hub) = hubs.by_node.get(address) {
            return Ok(Arc::clone(hub.shared()));
        }
        let hub = self.spawn(address)?;
        let shared = Arc::clone(hub.shared());
        hubs.by_node.insert(address.clone(), hub);
        Ok(shared)
    }

    /// Starts a hub for the node at `address`; returns at once.
    fn spawn(&self, address: &NodeAddress) -> Result<Hub> {
        let info = self.owners.node_info(address);
        let endpoint = Endpoint::node(address, &info, self.tls.clone())?;
        let me = self.me.clone();
        let on_trouble: TroubleHook = Box::new(move || {
            if let Some(nodes) = me.upgrade() {
                nodes.node_in_trouble();
            }
        });
        let me = self.me.clone();
        let on_unused: UnusedHook = Box::new(move || {
            if let Some(nodes) = me.upgrade() {
                nodes.tend(None);
            }
        });
        log::debug!("starting a pub/sub hub for {address}");
        Hub::spawn(
            endpoint,
            info.redis_settings().username().map(str::to_owned),
            &self.settings,
            Some(on_trouble),
            Some(on_unused),
            format!("redlease-pubsub-{address}"),
        )
    }

    /// A hub's node could not be reached: the map may be out of date.
    fn node_in_trouble(&self) {
        self.owners.refresh_soon();
        self.tend(None);
    }

    /// Matches the hubs with the map: stops those of nodes that are no masters anymore and
    /// have no channel left, joins the threads of stopped hubs that have ended, and spawns a
    /// hub for the first master if no master has one (for the notices). With a `generation`,
    /// only once per generation of the map.
    fn tend(&self, generation: Option<u64>) {
        if !self.takes_generation(generation) {
            return;
        }
        // Outside the lock: the map may take locks of its own.
        let masters = self.owners.masters();
        if masters.is_empty() {
            // A map that knows no master tells nothing about the hubs.
            return;
        }
        let mut hubs = self.hubs.lock();
        if hubs.stopping {
            return;
        }
        hubs.retired.retain(|hub| {
            let finished = hub.is_finished();
            if finished {
                hub.join_thread();
            }
            !finished
        });
        let gone: Vec<NodeAddress> = hubs
            .by_node
            .iter()
            .filter(|(address, hub)| {
                let leaving = !masters.contains(address);
                // One still in use stops when its last channel leaves it (it tells).
                hub.shared().set_leaving(leaving);
                leaving && hub.shared().retire_if_unused()
            })
            .map(|(address, _)| address.clone())
            .collect();
        for address in gone {
            if let Some(hub) = hubs.by_node.remove(&address) {
                log::debug!("stopping the pub/sub hub of {address}: no master anymore");
                hubs.retired_reconnects += hub.shared().reconnects();
                hubs.retired.push(hub);
            }
        }
        let a_master_has_a_hub = masters
            .iter()
            .any(|master| hubs.by_node.contains_key(master));
        match masters.first() {
            Some(first) if !a_master_has_a_hub => match self.spawn(first) {
                Ok(hub) => {
                    hubs.by_node.insert(first.clone(), hub);
                }
                Err(err) => log::warn!("no pub/sub hub for {first}: {err}"),
            },
            _ => {}
        }
    }

    /// Whether hubs are to be tended for the slot map's `generation` (any, with `None`): not
    /// once they stop, nor twice for one generation, which is then marked tended.
    fn takes_generation(&self, generation: Option<u64>) -> bool {
        let mut hubs = self.hubs.lock();
        if hubs.stopping {
            return false;
        }
        if let Some(generation) = generation {
            if hubs.tended == generation {
                return false;
            }
            hubs.tended = generation;
        }
        true
    }

    /// How many times the hubs connected again after their first connections.
    pub(super) fn reconnects(&self) -> u64 {
        let hubs = self.hubs.lock();
        hubs.retired_reconnects
            + hubs
                .by_node
                .values()
                .map(|hub| hub.shared().reconnects())
                .sum::<u64>()
    }

    /// How many channels the hubs are subscribed to, or busy subscribing or unsubscribing
    /// (a channel on its way from one node to another counts twice).
    pub(super) fn channel_count(&self) -> usize {
        let hubs = self.hubs.lock();
        hubs.by_node
            .values()
            .map(|hub| hub.shared().channel_count())
            .sum()
    }

    /// Ends every hub's connection, so each connects again and subscribes anew.
    pub(super) fn reconnect(&self) {
        let hubs = self.hubs.lock();
        for hub in hubs.by_node.values() {
            hub.shared().reconnect();
        }
    }

    /// Stops every hub and joins their threads (all told first, so they end together).
    pub(super) fn stop(&self) {
        let stopped: Vec<Hub> = {
            let mut hubs = self.hubs.lock();
            hubs.stopping = true;
            let Hubs {
                by_node,
                retired,
                retired_reconnects,
                ..
            } = &mut *hubs;
            let mut stopped: Vec<Hub> = by_node.drain().map(|(_, hub)| hub).collect();
            *retired_reconnects += stopped
                .iter()
                .map(|hub| hub.shared().reconnects())
                .sum::<u64>();
            stopped.append(retired);
            stopped
        };
        for hub in &stopped {
            hub.signal_stop();
        }
        // Outside the lock: a listener may be waiting for it in its hook.
        for hub in &stopped {
            hub.join_thread();
        }
    }
}

/// How a subscription of cluster mode follows its channel's slot.
pub(super) struct Route {
    nodes: Arc<ClusterHubs>,
    /// The node the subscription is on; `None` while no master serves the slot.
    node: Option<NodeAddress>,
    slot: u16,
    /// The map's generation when the subscription last checked where its slot is.
    generation: u64,
    /// What the waiter listens for.
    interest: Interest,
}

impl Route {
    /// Moves `member` to the master that serves its slot if it is not there anymore, or its
    /// node ended it, or its node cannot be reached and the map (asked again) names another;
    /// answers whether it moved and the new subscription is live, for the wait loop to try
    /// again at once (a release may have gone by unheard). One that moved without being
    /// live yet answers `false`: the wait loop polls while a subscription is not live, and
    /// trying again at once each time would spin. A pending wake moves with the waiter.
    ///
    /// # Errors
    /// Redis's refusal of the subscription at its new node (as for a new subscription), or
    /// [`Error::ShutDown`] once the hub stopped.
    pub(super) fn follow(&mut self, member: &mut Member) -> Result<bool> {
        let nodes = &self.nodes;
        // Read before the owner is: a change after it is seen next time.
        let generation = nodes.owners.generation();
        let (connected, dropped) = member.status();
        if generation == self.generation && connected && !dropped {
            return Ok(false);
        }
        if generation != self.generation {
            nodes.tend(Some(generation));
        }
        if dropped || !connected {
            // The map may be out of date: the slot moved, or the node is gone.
            nodes.owners.refresh_soon();
        }
        self.generation = generation;
        let Some(owner) = nodes.owner_of(self.slot) else {
            return Ok(false);
        };
        if self.node.as_ref() == Some(&owner) && !dropped {
            // Same node: its hub reconnects, and subscribes again, by itself.
            return Ok(false);
        }
        let joined = nodes.join(&owner, member.channel(), &self.interest)?;
        if member.take_wake() {
            joined.pass_wake_on();
        }
        let live = joined.is_live();
        log::debug!(
            "subscription to {:?} moved to {owner} (live: {live})",
            member.channel()
        );
        // Joined before leaving: a channel that stays on the same node is not unsubscribed
        // in between.
        *member = joined;
        self.node = Some(owner);
        Ok(live)
    }
}
