//! [`Client`]: the one internal client every primitive talks to Redis through.
//!
//! A client is one Redis client identity (a random v4 UUID, the first half of every holder
//! id) with its command connection pool, its watchdog thread, its pub/sub listener thread,
//! its timeouts and its request ids. [`LockManager`](crate::LockManager) builds it and hands
//! an `Arc` of it to every handle it makes; the last `Arc` dropped stops and joins the
//! threads. It knows nothing of the primitives above it: it may use the pool, the watchdog,
//! the pub/sub hub, the resolver, the TLS set-up and the naming rules, nothing else.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::protocol::names::{self, ForceReleaseNotice, FORCE_RELEASE_CHANNEL};
use crate::pubsub::{Notices, PubSubHub};
use crate::resolve::Resolver;
use crate::stats::{Stats, WaitRecorder};
use crate::tls::{self, TlsOptions};
use crate::watchdog::{LostCallback, Watchdog};

/// What a client is built from; checked by the builder before.
pub(crate) struct Settings {
    pub(crate) info: redis::ConnectionInfo,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) max_idle_connections: usize,
    pub(crate) on_lost: Option<LostCallback>,
    pub(crate) tls: TlsOptions,
}

pub(crate) struct Client {
    id: String,
    pool: Arc<Pool>,
    watchdog: Watchdog,
    hub: PubSubHub,
    /// How long a release answer is kept for a retry of the same request.
    release_latch_ms: u64,
    next_request: AtomicU64,
    shut_down: AtomicBool,
    waits: WaitRecorder,
}

impl Client {
    /// Connects (one `PING` must be answered) and starts the watchdog and pub/sub threads.
    pub(crate) fn connect(settings: Settings) -> Result<Arc<Client>> {
        let Settings {
            info,
            connect_timeout,
            response_timeout,
            watchdog_timeout,
            max_idle_connections,
            on_lost,
            tls,
        } = settings;
        // No CLIENT SETINFO on new connections: it costs a round trip, and on a silent
        // server its ignored replies would make connecting take more than its timeout.
        let info = info
            .clone()
            .set_tcp_settings(info.tcp_settings().clone().set_nodelay(true))
            .set_redis_settings(info.redis_settings().clone().set_skip_set_lib_name());
        // The command connections' client, and for TLS the pub/sub connection's set-up, made
        // from the same options.
        let (redis_client, tls_connector) = tls::prepare(info.clone(), tls)?;
        // One resolver for the pool and the pub/sub connection, so they share one cache of
        // the host's addresses and never look it up twice at once.
        let resolver = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port)
            | redis::ConnectionAddr::TcpTls { host, port, .. } => {
                Some(Arc::new(Resolver::new(host, *port)))
            }
            _ => None,
        };
        let pool = Arc::new(Pool::new(
            redis_client,
            resolver.clone(),
            connect_timeout,
            response_timeout,
            max_idle_connections,
        ));
        pool.run(|connection| redis::cmd("PING").query::<()>(connection))?;
        let watchdog = Watchdog::start(Arc::clone(&pool), watchdog_timeout, on_lost)?;
        let sink = watchdog.notice_sink();
        let notices = Notices {
            channel: FORCE_RELEASE_CHANNEL.to_owned(),
            handler: Box::new(move |message| match ForceReleaseNotice::parse(message) {
                Some(notice) => sink.force_released(notice.name, notice.holder, notice.token),
                None => log::debug!("ignoring a malformed force-release notice"),
            }),
        };
        let started = PubSubHub::start(
            &info,
            resolver,
            tls_connector,
            connect_timeout,
            response_timeout,
            notices,
        );
        let hub = match started {
            Ok(hub) => hub,
            Err(err) => {
                watchdog.stop();
                return Err(err);
            }
        };
        let release_latch_ms = (response_timeout * 4)
            .max(Duration::from_secs(10))
            .as_millis() as u64;
        Ok(Arc::new(Client {
            id: uuid::Uuid::new_v4().to_string(),
            pool,
            watchdog,
            hub,
            release_latch_ms,
            next_request: AtomicU64::new(0),
            shut_down: AtomicBool::new(false),
            waits: WaitRecorder::new(),
        }))
    }

    /// Where the wait loop counts this client's waits and acquisitions.
    pub(crate) fn wait_recorder(&self) -> &WaitRecorder {
        &self.waits
    }

    /// A snapshot of the counters of the client's waits, watchdog and pub/sub hub.
    pub(crate) fn stats(&self) -> Stats {
        let watchdog = self.watchdog.counts();
        Stats {
            held: watchdog.held,
            waiting: self.waits.waiting(),
            acquisitions: self.waits.acquisitions(),
            renewals_sent: watchdog.renewals_sent,
            renewals_failed: watchdog.renewals_failed,
            renewal_batches: watchdog.renewal_batches,
            lost_not_held_anymore: watchdog.lost[0],
            lost_lease_expired: watchdog.lost[1],
            lost_force_released: watchdog.lost[2],
            pubsub_reconnects: self.hub.reconnects(),
            wait_times: self.waits.wait_times(),
        }
    }

    /// The client id: the first half of every holder id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The command connections.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The thread that renews leases and reports losses.
    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    /// The pub/sub listener that wakes waiters.
    pub(crate) fn hub(&self) -> &PubSubHub {
        &self.hub
    }

    /// The lease of watched locks.
    pub(crate) fn watchdog_timeout(&self) -> Duration {
        self.watchdog.timeout()
    }

    /// The lease of watched locks in whole milliseconds, as scripts take it.
    pub(crate) fn watchdog_timeout_ms(&self) -> u64 {
        self.watchdog.timeout_ms()
    }

    /// How long a release's answer is kept for a retry of the same request, in ms.
    pub(crate) fn release_latch_ms(&self) -> u64 {
        self.release_latch_ms
    }

    /// A release request id unique to this client: the client id is random, the counter
    /// never repeats. (Cheaper than a fresh random UUID per release.)
    pub(crate) fn next_request_id(&self) -> String {
        let number = self.next_request.fetch_add(1, Ordering::Relaxed);
        format!("{}:{number}", self.id)
    }

    /// A holder id for a new acquisition chain: `<client-id>:<chain-number>`.
    pub(crate) fn new_holder_id(&self) -> String {
        names::new_holder_id(&self.id)
    }

    /// [`Error::ShutDown`] once the client is shut down.
    pub(crate) fn ensure_running(&self) -> Result<()> {
        if self.shut_down.load(Ordering::Acquire) {
            Err(Error::ShutDown)
        } else {
            Ok(())
        }
    }

    /// Stops the watchdog and the pub/sub listener and joins their threads (once).
    pub(crate) fn shutdown(&self) {
        if !self.shut_down.swap(true, Ordering::AcqRel) {
            self.watchdog.stop();
            self.hub.stop();
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.shutdown();
    }
}
