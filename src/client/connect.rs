//! How a [`Client`] comes up, step by step: the connection settings, the master Sentinel
//! names, the router (one pool, or the cluster's), a first `PING`, then the threads it owns
//! (watchdog, pub/sub, failover watcher, cleanup). A thread started before a later step fails
//! is stopped by [`Starting`]'s drop, on every error path alike.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use super::cleanup::Cleanup;
use super::clock::ServerClock;
use super::{Client, SentinelSettings, Settings};
use crate::client::call::replication::{AckSetting, ShortfallLog};
use crate::client::call::route::Router;
use crate::client::pubsub::{Notices, PubSub};
use crate::client::recount::Recount;
use crate::client::stats::WaitRecorder;
use crate::client::topology::cluster::Cluster;
use crate::client::topology::pool::{Pool, PoolSizes, PoolTimeouts, Target};
use crate::client::topology::resolve::Resolver;
use crate::client::topology::sentinel::{MasterLocator, SwitchWatcher};
use crate::client::topology::tls::{self, TlsConnector, TlsOptions};
use crate::client::wait::line::Lines;
use crate::client::watchdog::Watchdog;
use crate::error::Result;
use crate::layout::FORCE_RELEASE_CHANNEL;
use crate::protocol::names::Notice;

/// The connect and response timeouts, which every step is bounded by.
#[derive(Clone, Copy)]
struct Timeouts {
    connect: Duration,
    response: Duration,
}

/// The threads of a client being built: each is stopped when this is dropped, unless
/// [`finish`](Starting::finish) handed them to the client.
#[derive(Default)]
struct Starting {
    watchdog: Option<Watchdog>,
    pubsub: Option<Arc<PubSub>>,
    switch_watcher: Option<SwitchWatcher>,
}

impl Starting {
    /// Hands the threads over: nothing is stopped any more.
    fn finish(mut self) -> (Watchdog, Arc<PubSub>, Option<SwitchWatcher>) {
        let watchdog = self.watchdog.take().expect("the watchdog started");
        let pubsub = self.pubsub.take().expect("the pub/sub started");
        (watchdog, pubsub, self.switch_watcher.take())
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(watcher) = &self.switch_watcher {
            watcher.stop();
        }
        if let Some(pubsub) = &self.pubsub {
            pubsub.stop();
        }
        if let Some(watchdog) = &self.watchdog {
            watchdog.stop();
        }
    }
}

impl Client {
    /// Connects (one `PING` must be answered) and starts the watchdog and pub/sub threads.
    pub(crate) fn connect(settings: Settings) -> Result<Arc<Client>> {
        let Settings {
            info,
            sentinel,
            cluster_seeds,
            outage_grace,
            connect_timeout,
            response_timeout,
            watchdog_timeout,
            pool_sizes,
            callbacks,
            ack_setting,
            tls,
            local_handoffs,
            pubsub,
        } = settings;
        let timeouts = Timeouts {
            connect: connect_timeout,
            response: response_timeout,
        };
        let mut reached = Reached::reach(info, sentinel, cluster_seeds, tls, timeouts, pool_sizes)?;
        reached.prepare_acks(ack_setting.as_ref())?;
        let router = Arc::clone(&reached.router);
        let mut starting = Starting::default();
        let watchdog = Watchdog::start(
            Arc::clone(&router),
            watchdog_timeout,
            ack_setting.clone(),
            callbacks,
        )?;
        let notices = holder_notices(starting.watchdog.insert(watchdog));
        let pubsub = Arc::new(reached.start_pubsub(pubsub, timeouts, notices)?);
        let pubsub = starting.pubsub.insert(pubsub);
        starting.switch_watcher = watch_switches(reached.locator, &router, pubsub)?;
        let cleanup = Cleanup::start(Arc::clone(&router))?;
        let recount = Recount::start_for(ack_setting.as_ref(), &router)?;
        let (watchdog, pubsub, switch_watcher) = starting.finish();
        Ok(Arc::new(Client {
            id: uuid::Uuid::new_v4().to_string(),
            router,
            watchdog,
            pubsub,
            outage_grace,
            one_send: timeouts.connect + timeouts.response,
            clock: reached.clock,
            switch_watcher,
            cleanup,
            recount,
            next_request: AtomicU64::new(0),
            shut_down: AtomicBool::new(false),
            waits: WaitRecorder::new(),
            handoffs: Lines::new(local_handoffs),
            acks: ack_setting,
            releases_unreplicated: AtomicU64::new(0),
            handoffs_taken: AtomicU64::new(0),
            unreplicated_releases_log: ShortfallLog::new(),
        }))
    }
}

/// What the first steps found: the server's settings, the router to its pools (which
/// answered a `PING`), and what the pub/sub connection needs beside.
struct Reached {
    info: redis::ConnectionInfo,
    router: Arc<Router>,
    /// The server's clock, as read once (of the first master, in cluster mode).
    clock: ServerClock,
    resolver: Option<Arc<Resolver>>,
    locator: Option<Arc<MasterLocator>>,
    tls_connector: Option<TlsConnector>,
}

impl Reached {
    /// Sets up the connection settings, asks the sentinels for the master (sentinel mode)
    /// or the seeds for the slot map (cluster mode), and `PING`s every master.
    fn reach(
        info: redis::ConnectionInfo,
        sentinel: Option<SentinelSettings>,
        cluster_seeds: Option<Vec<redis::ConnectionInfo>>,
        tls: TlsOptions,
        timeouts: Timeouts,
        pool_sizes: PoolSizes,
    ) -> Result<Reached> {
        let info = without_set_info(info);
        // The command connections' client, and for TLS the pub/sub connection's set-up, made
        // from the same options.
        let (redis_client, tls_connector) = tls::prepare(info.clone(), tls)?;
        let resolver = resolver_of(&info);
        // The master's settings (or every node's), TLS parameters included.
        let server_info = redis_client.get_connection_info().clone();
        let locator = locate_master(sentinel, &server_info, timeouts)?;
        let pool_timeouts = PoolTimeouts {
            connect: timeouts.connect,
            response: timeouts.response,
        };
        let router = Arc::new(match cluster_seeds {
            Some(seeds) => Router::Cluster(Cluster::discover(
                &seeds,
                server_info,
                pool_timeouts,
                pool_sizes,
            )?),
            None => {
                let target = match &locator {
                    Some(locator) => Target::Sentinel(Arc::clone(locator)),
                    None => Target::Fixed {
                        client: redis_client,
                        resolver: resolver.clone(),
                    },
                };
                let pool = Pool::new(target, pool_timeouts, pool_sizes);
                Router::Single(Arc::new(pool))
            }
        });
        for pool in router.master_pools() {
            pool.run(|connection| redis::cmd("PING").query::<()>(connection))?;
        }
        let clock = read_clock(&router);
        Ok(Reached {
            clock,
            info,
            router,
            resolver,
            locator,
            tls_connector,
        })
    }

    /// Prepares the masters for the acknowledgements `acks`: asks each whether it can answer
    /// a fixed count's command; in connected mode, reads each one's count of replicas in sync.
    fn prepare_acks(&self, acks: Option<&AckSetting>) -> Result<()> {
        match acks {
            Some(AckSetting::Fixed(acks)) => {
                for pool in self.router.master_pools() {
                    pool.run(|connection| Ok(acks.probe(connection)))??;
                }
            }
            Some(AckSetting::Connected { .. }) => {
                for pool in self.router.master_pools() {
                    pool.in_sync().recount(&pool);
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Starts the pub/sub (`on`): one hub per master in cluster mode, else one hub; or none.
    fn start_pubsub(&mut self, on: bool, timeouts: Timeouts, notices: Notices) -> Result<PubSub> {
        if !on {
            return Ok(PubSub::off());
        }
        let tls_connector = self.tls_connector.take();
        match self.router.cluster() {
            Some(cluster) => PubSub::start_cluster(
                Arc::clone(cluster),
                tls_connector,
                timeouts.connect,
                timeouts.response,
                notices,
            ),
            None => PubSub::start(
                &self.info,
                self.resolver.clone(),
                self.locator.clone(),
                tls_connector,
                timeouts.connect,
                timeouts.response,
                notices,
            ),
        }
    }
}

/// `info` with `TCP_NODELAY`, and without `CLIENT SETINFO` on new connections: it costs a
/// round trip, and on a silent server its ignored replies would make connecting take more
/// than its timeout.
fn without_set_info(info: redis::ConnectionInfo) -> redis::ConnectionInfo {
    info.clone()
        .set_tcp_settings(info.tcp_settings().clone().set_nodelay(true))
        .set_redis_settings(info.redis_settings().clone().set_skip_set_lib_name())
}

/// One resolver for the pool and the pub/sub connection, so they share one cache of the
/// host's addresses and never look it up twice at once; `None` for a Unix socket.
fn resolver_of(info: &redis::ConnectionInfo) -> Option<Arc<Resolver>> {
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => {
            Some(Arc::new(Resolver::new(host, *port)))
        }
        _ => None,
    }
}

/// In sentinel mode, the locator of the master the sentinels name (asked now).
fn locate_master(
    sentinel: Option<SentinelSettings>,
    master_info: &redis::ConnectionInfo,
    timeouts: Timeouts,
) -> Result<Option<Arc<MasterLocator>>> {
    let Some(SentinelSettings {
        sentinels,
        master_name,
    }) = sentinel
    else {
        return Ok(None);
    };
    let locator = MasterLocator::discover(
        sentinels,
        &master_name,
        master_info.clone(),
        timeouts.connect,
        timeouts.response,
    )?;
    Ok(Some(locator))
}

/// The notice channel every manager listens to, handled by the watchdog: a force release or
/// a revocation request reported to the holder's guard at once.
fn holder_notices(watchdog: &Watchdog) -> Notices {
    let sink = watchdog.notice_sink();
    Notices {
        channel: FORCE_RELEASE_CHANNEL.to_owned(),
        handler: Box::new(move |message| match Notice::parse(message) {
            Some(Notice::ForceReleased {
                token,
                holder,
                name,
            }) => sink.force_released(name, holder, token),
            Some(Notice::RevocationRequested { holder, name }) => {
                sink.revocation_requested(name, holder)
            }
            None => log::debug!("ignoring a malformed notice"),
        }),
    }
}

/// In sentinel mode, the thread that hears failovers: at a new master, connections to the old
/// one go and the pub/sub listener moves.
fn watch_switches(
    locator: Option<Arc<MasterLocator>>,
    router: &Router,
    pubsub: &Arc<PubSub>,
) -> Result<Option<SwitchWatcher>> {
    let (Some(locator), Router::Single(pool)) = (locator, router) else {
        return Ok(None);
    };
    let pool = Arc::clone(pool);
    let pubsub = Arc::clone(pubsub);
    let on_switch = Box::new(move || {
        pool.forget_idle();
        pubsub.reconnect();
    });
    SwitchWatcher::start(locator, on_switch).map(Some)
}

/// The server's clock, read with `TIME` on the first master; without a reading (a user who
/// may not run `TIME`, which the request scripts then cannot run either), the local wall
/// clock stands in.
fn read_clock(router: &Router) -> ServerClock {
    let clock = ServerClock::default();
    if let Some(pool) = router.master_pools().first() {
        if let Err(err) = pool.run(|connection| clock.read_from(connection)) {
            log::warn!("cannot read the server's clock ({err}): the local clock stands in");
        }
    }
    clock
}
