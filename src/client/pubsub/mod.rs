//! Pub/sub: [`PubSub`], one per manager, serving every waiting thread of the process through
//! one hub (a listener thread and one subscribed connection), or in cluster mode one hub per
//! master.
//!
//! A waiter [`subscribe`](PubSub::subscribe)s to the release channel of a lock and gets a
//! [`Subscription`] once Redis has confirmed it, so a release published after that point is
//! never missed. Subscriptions to one channel are shared and counted: the first waiter sends
//! `SUBSCRIBE`, the last one to leave sends `UNSUBSCRIBE`. When the connection drops (or
//! stops answering pings) the listener reconnects, subscribes again to every channel that
//! has waiters, and wakes all waiters, which retry at once: a release may have gone by
//! unseen. Besides the release channels, each hub stays subscribed to one [`Notices`] channel
//! for as long as it runs, and hands every message on it to the notice handler (on the
//! listener thread, outside the hub's lock).
//!
//! What Redis refuses: a refused login, or a refused `SUBSCRIBE` command (not just the
//! notice channel), on the first connection fails [`PubSub::start`], and with it the
//! manager's build: no waiter could ever be woken. A refused notice channel only costs the
//! notices. A refused release channel fails the waiter that asked for it, with the typed
//! error, at once: a misconfigured ACL shows up at the first wait that needs it, instead
//! of as waiters that quietly poll. Waiters already subscribed when a later connection is
//! refused (the ACL changed under a running manager) poll, as they do while the connection
//! is down.
//!
//! In cluster mode ([`PubSub::start_cluster`]) there is one such hub per master, and each
//! subscription goes to the master of its channel's slot: with `SSUBSCRIBE` when the cluster
//! publishes releases on shard channels (Redis 7), else with `SUBSCRIBE`; the notice channel
//! is a plain one everywhere. A subscription follows its slot when the slot moves (a
//! failover, a migration): the wait loop asks it to, with [`Subscription::follow`], before
//! each sleep.
//!
//! The parts, each in its own module:
//! - [`cluster_hubs`]: cluster mode: a hub per master, and subscriptions that follow their slot.
//! - [`hub`]: one hub: its listener thread, its shared state, joining and leaving channels.
//! - [`channels`]: the bookkeeping under the hub's one lock (channels, waiters, counts, wake
//!   rules, plain or sharded commands); no I/O.
//! - [`outbox`]: commands queued under that lock and written outside it, in order, by one
//!   thread at a time, so a stalled write holds up no one else.
//! - [`listener`]: the thread that connects, reads, pings and dispatches frames.
//! - `offline` (unit tests only): a hub without its listener, whose messages a schedule
//!   search plays.
//! - [`transport`]: the connection itself, which knows nothing of channels: the socket, the
//!   address and `AUTH`; for `rediss://`, the TLS session that the reading and the writing
//!   handles of the connection share; the RESP2 parser, total on any input.
//!
//! This module holds the types the rest of the crate uses and the glue between them.

mod channels;
mod cluster_hubs;
mod hub;
mod listener;
#[cfg(test)]
pub(crate) mod offline;
mod outbox;
#[cfg(test)]
mod tests;
mod transport;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::ConnectionInfo;

use crate::client::sync::Receiver;
use crate::client::topology::cluster::Cluster;
use crate::client::topology::resolve::Resolver;
use crate::client::topology::sentinel::MasterLocator;
use crate::client::topology::tls::TlsConnector;
use crate::error::{Error, Result};
pub(crate) use channels::Letterbox;
use channels::{Interest, Mode};
pub(crate) use cluster_hubs::SlotOwners;
use cluster_hubs::{ClusterHubs, Route};
use hub::{Hub, HubSettings, Member};
use transport::connection::Endpoint;

/// Handles one message of the notice channel.
pub(crate) type NoticeHandler = Box<dyn Fn(&[u8]) + Send + Sync>;

/// Redis's error reply to the `AUTH` of the subscribed connection, carried in the
/// `io::Error` of the failed connection attempt.
#[derive(Debug)]
pub(super) struct LoginRefused(pub(super) String);

impl std::fmt::Display for LoginRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AUTH refused: {}", self.0)
    }
}

impl std::error::Error for LoginRefused {}

impl LoginRefused {
    /// Whether Redis refused the credentials (`WRONGPASS`, or `ERR AUTH <password> called
    /// without any password configured`), rather than the connection: Redis answers
    /// `ERR max number of clients reached` to whatever a new connection sends first.
    fn is_about_credentials(&self) -> bool {
        self.0.contains("AUTH")
            || matches!(
                Error::from_reply(&self.0),
                Error::AuthenticationFailed { .. }
            )
    }
}

/// The channel the hub always listens to, and what to do with its messages.
pub(crate) struct Notices {
    pub(crate) channel: String,
    pub(crate) handler: NoticeHandler,
}

impl Notices {
    /// The settings every hub of one manager is made with.
    fn settings(
        self,
        mode: Mode,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> HubSettings {
        HubSettings {
            mode,
            notice_channel: self.channel,
            notice_handler: Arc::from(self.handler),
            connect_timeout,
            response_timeout,
        }
    }
}

/// The pub/sub of one manager: one hub, or in cluster mode one per master.
pub(crate) struct PubSub {
    kind: Kind,
}

enum Kind {
    /// A single server, or the master Sentinel names.
    Single(Hub),
    Cluster(Arc<ClusterHubs>),
    /// None at all (the manager was built without pub/sub): subscriptions are never live,
    /// and their waiters poll.
    Off,
}

/// A waiting thread's membership in the subscription to one channel; leaving is dropping it.
pub(crate) struct Subscription {
    member: Member,
    /// Cluster mode: how the subscription follows its channel's slot.
    route: Option<Route>,
}

/// Wakes one [`Subscription::local`] from another thread of the process.
#[derive(Clone)]
pub(crate) struct LocalWaker(Arc<channels::Waiter>);

impl LocalWaker {
    /// Wakes the subscription's waiter (once: a wake it has not taken yet stands for both).
    pub(crate) fn wake(&self) {
        self.0.wake();
    }
}

impl Subscription {
    /// A subscription no server feeds, always live: only this process wakes it, through its
    /// [`LocalWaker`] (a release that hands a lock to this waiter inside its script).
    pub(crate) fn local() -> (Self, LocalWaker) {
        let member = Member::local();
        let waker = LocalWaker(member.waker());
        let subscription = Subscription {
            member,
            route: None,
        };
        (subscription, waker)
    }

    /// Whether Redis has confirmed the subscription and the connection still stands: only
    /// then will a release wake this waiter.
    pub(crate) fn is_live(&self) -> bool {
        self.member.is_live()
    }

    /// Sleeps until this waiter is woken or `timeout` passes; answers whether it was woken.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        self.member.wait(timeout)
    }

    /// The receiver that gets this waiter's wakes, to wait on several subscriptions at once.
    pub(crate) fn woken(&self) -> &Receiver<()> {
        self.member.woken()
    }

    /// Gives back a wake this waiter took and will not use; on leaving, it goes to another
    /// waiter.
    pub(crate) fn pass_wake_on(&self) {
        self.member.pass_wake_on();
    }

    /// In cluster mode, moves the subscription to the master that serves its channel's slot
    /// now, if it is elsewhere (the slot moved, the node ended the subscription, or the node
    /// cannot be reached and the map names another); answers whether it moved and is live,
    /// so the caller tries again at once (a release may have gone by unheard). Cheap while
    /// nothing changed; always `false` on a single server.
    ///
    /// # Errors
    /// Redis's refusal of the subscription at the new node, as for a new subscription, or
    /// [`Error::ShutDown`] once the hub stopped.
    pub(crate) fn follow(&mut self) -> Result<bool> {
        match &mut self.route {
            Some(route) => route.follow(&mut self.member),
            None => Ok(false),
        }
    }
}

impl PubSub {
    /// No pub/sub: no connection, no thread; every subscription is one that is never live,
    /// so its waiter polls (see `wait`), and no notice is heard.
    pub(crate) fn off() -> Self {
        PubSub { kind: Kind::Off }
    }

    pub(crate) fn start(
        info: &ConnectionInfo,
        resolver: Option<Arc<Resolver>>,
        located: Option<Arc<MasterLocator>>,
        tls: Option<TlsConnector>,
        connect_timeout: Duration,
        response_timeout: Duration,
        notices: Notices,
    ) -> Result<Self> {
        let settings = notices.settings(Mode::Plain, connect_timeout, response_timeout);
        let hub = Hub::spawn(
            Endpoint::from_info(info, resolver, located, tls)?,
            info.redis_settings().username().map(str::to_owned),
            &settings,
            None,
            None,
            "redlease-pubsub".into(),
        )?;
        // Give the first connection a chance, so the first waiters find a live subscription
        // and no notice is missed from the start.
        let ready_by = Instant::now() + connect_timeout;
        match hub.shared().await_first_connection(ready_by) {
            Some(err) => {
                hub.stop();
                Err(err)
            }
            None => Ok(PubSub {
                kind: Kind::Single(hub),
            }),
        }
    }

    /// The hub of a cluster manager: one hub per master, each connecting with the
    /// manager's settings at that node ([`Cluster::node_info`], over TLS with `tls`);
    /// release channels are shard channels when the cluster publishes on them
    /// ([`Cluster::sharded_pubsub`]). The first master's hub is started at once and fails
    /// the start as a single server's does (a refused login, a refused `SUBSCRIBE`
    /// command); the others start when a waiter first needs them.
    pub(crate) fn start_cluster(
        cluster: Arc<Cluster>,
        tls: Option<TlsConnector>,
        connect_timeout: Duration,
        response_timeout: Duration,
        notices: Notices,
    ) -> Result<Self> {
        let mode = if cluster.sharded_pubsub() {
            Mode::Sharded
        } else {
            Mode::Plain
        };
        Self::start_over(
            cluster,
            mode,
            tls,
            connect_timeout,
            response_timeout,
            notices,
        )
    }

    /// [`start_cluster`](PubSub::start_cluster) over any map of slot owners.
    fn start_over(
        owners: Arc<dyn SlotOwners>,
        mode: Mode,
        tls: Option<TlsConnector>,
        connect_timeout: Duration,
        response_timeout: Duration,
        notices: Notices,
    ) -> Result<Self> {
        let settings = notices.settings(mode, connect_timeout, response_timeout);
        Ok(PubSub {
            kind: Kind::Cluster(ClusterHubs::start(owners, settings, tls)?),
        })
    }

    /// Joins the waiters for `lock` on its release `channel`; returns once Redis confirmed
    /// the subscription, or after the response timeout, or at once while there is no
    /// connection (check [`Subscription::is_live`]). Fails with Redis's refusal
    /// ([`Error::PermissionDenied`] for an ACL without the channel) once Redis refused it.
    pub(crate) fn subscribe(&self, channel: &str, lock: &str) -> Result<Subscription> {
        self.join(channel, &Interest::lock(Some(lock)))
    }

    /// Like [`subscribe`](PubSub::subscribe), keeping every message other than a wake heard
    /// on `channel` in `letters` (a fair-lock waiter's own channel, which carries grants).
    pub(crate) fn subscribe_with_letters(
        &self,
        channel: &str,
        lock: &str,
        letters: Letterbox,
    ) -> Result<Subscription> {
        self.join(channel, &Interest::lock(Some(lock)).with_letters(letters))
    }

    /// Like [`subscribe`](PubSub::subscribe), for a waiter that every message on
    /// `channel` wakes (the waiters of a latch or a semaphore, where one message may let many
    /// through).
    pub(crate) fn subscribe_to_every_message(&self, channel: &str) -> Result<Subscription> {
        self.join(channel, &Interest::lock(None))
    }

    fn join(&self, channel: &str, interest: &Interest) -> Result<Subscription> {
        match &self.kind {
            Kind::Single(hub) => Ok(Subscription {
                member: hub.shared().join(channel, interest)?,
                route: None,
            }),
            Kind::Cluster(nodes) => {
                let (member, route) = nodes.subscribe(channel, interest)?;
                Ok(Subscription {
                    member,
                    route: Some(route),
                })
            }
            Kind::Off => Ok(Subscription {
                member: Member::detached(channel, interest),
                route: None,
            }),
        }
    }

    /// How many times the listeners connected again after their first connections.
    pub(crate) fn reconnects(&self) -> u64 {
        match &self.kind {
            Kind::Single(hub) => hub.shared().reconnects(),
            Kind::Cluster(nodes) => nodes.reconnects(),
            Kind::Off => 0,
        }
    }

    /// How many channels the hub is subscribed to, or busy subscribing or unsubscribing.
    pub(crate) fn channel_count(&self) -> usize {
        match &self.kind {
            Kind::Single(hub) => hub.shared().channel_count(),
            Kind::Cluster(nodes) => nodes.channel_count(),
            Kind::Off => 0,
        }
    }

    /// Ends the subscribed connections, so the listeners connect again (to where the master
    /// is now) and subscribe anew; waiters poll meanwhile.
    pub(crate) fn reconnect(&self) {
        match &self.kind {
            Kind::Single(hub) => hub.shared().reconnect(),
            Kind::Cluster(nodes) => nodes.reconnect(),
            Kind::Off => {}
        }
    }

    /// Stops and joins the listener threads; waiters fall back to their PTTL hints.
    pub(crate) fn stop(&self) {
        match &self.kind {
            Kind::Single(hub) => hub.stop(),
            Kind::Cluster(nodes) => nodes.stop(),
            Kind::Off => {}
        }
    }
}
