//! Sentinel mode: where the master is now ([`MasterLocator`]) and the thread that hears a
//! failover as it happens ([`SwitchWatcher`]).
//!
//! The locator asks the sentinels (`SENTINEL get-master-addr-by-name`, the first that knows
//! wins and is asked first next time) and keeps the answer with a generation number that
//! grows with every change of master, so the pool can tell connections to an old master
//! from connections to the new one. It is asked again when a connection to the master fails
//! or the master answers `READONLY` (it was demoted), at most once per
//! [`ASK_AGAIN_AFTER`], and whenever the watcher hears `+switch-master` for our master on a
//! sentinel's pub/sub channel of that name. The watcher, one thread per manager named
//! `redlease-sentinel`, then calls the manager's hook, which drops idle connections to the
//! old master and moves the pub/sub listener to the new one.
//!
//! Every call to a sentinel has the manager's connect and response timeouts. This module
//! knows nothing of locks; it may use the error type, the resolver and redis-rs, nothing else.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use redis::ConnectionInfo;

use crate::error::{Error, Result};

/// The shortest time between two lookups after failures: a burst of failing calls asks the
/// sentinels once.
pub(crate) const ASK_AGAIN_AFTER: Duration = Duration::from_millis(100);

/// How often the watcher looks whether it should stop while no message arrives.
const WATCHER_POLL: Duration = Duration::from_millis(200);

/// The longest pause of the watcher between two rounds over the sentinels, when none answers.
const WATCHER_MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The sentinels, the master's name, and where the master is now.
pub(crate) struct MasterLocator {
    master_name: String,
    /// The sentinels, the one that answered last first.
    sentinels: Mutex<Vec<ConnectionInfo>>,
    /// Everything of a connection to the master but its address (user, password, database,
    /// TLS).
    template: ConnectionInfo,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// The master's address, once known.
    master: Mutex<Option<(String, u16)>>,
    /// Grows with every change of master.
    generation: AtomicU64,
    /// When the sentinels were last asked, and whether someone asks now.
    asking: Mutex<Option<Instant>>,
}

impl MasterLocator {
    /// A locator for the master called `master_name`; asks the sentinels once and fails
    /// when none of them knows the master ([`Error::UnknownMaster`]) or none answers.
    pub(crate) fn discover(
        sentinels: Vec<ConnectionInfo>,
        master_name: &str,
        template: ConnectionInfo,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Arc<MasterLocator>> {
        if sentinels.is_empty() {
            return Err(Error::InvalidArgument(
                "sentinel mode needs at least one sentinel address".into(),
            ));
        }
        if master_name.is_empty() {
            return Err(Error::InvalidArgument(
                "the sentinels' name of the master is empty".into(),
            ));
        }
        let locator = Arc::new(MasterLocator {
            master_name: master_name.to_owned(),
            sentinels: Mutex::new(sentinels),
            template,
            connect_timeout,
            response_timeout,
            master: Mutex::new(None),
            generation: AtomicU64::new(0),
            asking: Mutex::new(None),
        });
        let master = locator.ask_sentinels()?;
        locator.settle(master);
        Ok(locator)
    }

    /// The master's name as the sentinels know it.
    pub(crate) fn master_name(&self) -> &str {
        &self.master_name
    }

    /// The master's host and port now.
    pub(crate) fn address(&self) -> (String, u16) {
        // Known from `discover` on: the placeholder is never used.
        self.master
            .lock()
            .clone()
            .unwrap_or_else(|| (String::from("127.0.0.1"), 0))
    }

    /// The connection info of the master now: the template's settings at its address.
    pub(crate) fn master_info(&self) -> ConnectionInfo {
        let (host, port) = self.address();
        self.info_at(host, port)
    }

    /// The template's settings (credentials, database, TLS) at `host:port`.
    pub(crate) fn info_at(&self, host: String, port: u16) -> ConnectionInfo {
        crate::client::topology::resolve::info_at(&self.template, host, port)
    }

    /// The generation of the master now: it grows with every change of master.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Asks the sentinels again after a call to the master failed or found it demoted,
    /// unless someone asked within [`ASK_AGAIN_AFTER`] or asks now. Answers whether the
    /// master changed.
    pub(crate) fn ask_again(&self) -> bool {
        {
            let mut asking = self.asking.lock();
            if asking.is_some_and(|asked_at| asked_at.elapsed() < ASK_AGAIN_AFTER) {
                return false;
            }
            *asking = Some(Instant::now());
        }
        match self.ask_sentinels() {
            Ok(master) => self.settle(master),
            Err(err) => {
                log::debug!("sentinels of {:?} not asked: {err}", self.master_name);
                false
            }
        }
    }

    /// A sentinel said the master moved to `host:port`. Answers whether that is news.
    pub(crate) fn switched_to(&self, host: String, port: u16) -> bool {
        self.settle((host, port))
    }

    /// Keeps `master` as the master; answers whether it changed.
    fn settle(&self, master: (String, u16)) -> bool {
        let mut current = self.master.lock();
        if current.as_ref() == Some(&master) {
            return false;
        }
        if let Some((host, port)) = current.as_ref() {
            log::warn!(
                "master {:?} moved from {host}:{port} to {}:{}",
                self.master_name,
                master.0,
                master.1
            );
        }
        *current = Some(master);
        self.generation.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Asks each sentinel in turn where the master is; the first that knows wins and is asked
    /// first next time.
    fn ask_sentinels(&self) -> Result<(String, u16)> {
        let sentinels = self.sentinels.lock().clone();
        let mut last_error = None;
        for (index, sentinel) in sentinels.iter().enumerate() {
            match self.ask(sentinel) {
                Ok(Some(master)) => {
                    if index > 0 {
                        let mut order = self.sentinels.lock();
                        let answered = sentinel.addr().to_string();
                        if let Some(position) =
                            order.iter().position(|s| s.addr().to_string() == answered)
                        {
                            let answered = order.remove(position);
                            order.insert(0, answered);
                        }
                    }
                    return Ok(master);
                }
                Ok(None) => {
                    log::debug!(
                        "sentinel {} does not know master {:?}",
                        sentinel.addr(),
                        self.master_name
                    );
                    last_error.get_or_insert(Error::UnknownMaster {
                        name: self.master_name.clone(),
                    });
                }
                Err(err) => {
                    log::debug!("sentinel {} did not answer: {err}", sentinel.addr());
                    if !matches!(last_error, Some(Error::UnknownMaster { .. })) {
                        last_error = Some(err);
                    }
                }
            }
        }
        Err(last_error.unwrap_or_else(|| Error::UnknownMaster {
            name: self.master_name.clone(),
        }))
    }

    /// One sentinel's answer: the master's address, or `None` when it does not know it.
    fn ask(&self, sentinel: &ConnectionInfo) -> Result<Option<(String, u16)>> {
        let mut connection = self.connect(sentinel)?;
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master_name)
            .query::<Option<(String, u16)>>(&mut connection)
            .map_err(|err| Error::from_redis(err, self.response_timeout))
    }

    /// A connection to `sentinel` with the manager's timeouts.
    fn connect(&self, sentinel: &ConnectionInfo) -> Result<redis::Connection> {
        let connection = redis::Client::open(sentinel.clone())
            .and_then(|client| client.get_connection_with_timeout(self.connect_timeout))
            .map_err(|err| Error::from_redis(err, self.connect_timeout))?;
        for outcome in [
            connection.set_read_timeout(Some(self.response_timeout)),
            connection.set_write_timeout(Some(self.response_timeout)),
        ] {
            outcome.map_err(|err| Error::from_redis(err, self.response_timeout))?;
        }
        Ok(connection)
    }
}

/// What the watcher calls after the master changed.
pub(crate) type SwitchHook = Box<dyn Fn() + Send + Sync>;

/// The thread that listens for `+switch-master` on one sentinel at a time.
pub(crate) struct SwitchWatcher {
    stop: Mutex<Option<Sender<()>>>,
    stopping: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl SwitchWatcher {
    /// Starts the watcher; `on_switch` runs on its thread after every change of master.
    pub(crate) fn start(locator: Arc<MasterLocator>, on_switch: SwitchHook) -> Result<Self> {
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("redlease-sentinel".into())
            .spawn({
                let stopping = Arc::clone(&stopping);
                move || watch(&locator, &on_switch, &stopping, &stopped)
            })
            .map_err(Error::ThreadSpawn)?;
        Ok(SwitchWatcher {
            stop: Mutex::new(Some(stop)),
            stopping,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stops the thread and joins it (within about [`WATCHER_POLL`]).
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        // Dropping the sender ends the watcher's pauses at once.
        drop(self.stop.lock().take());
        if let Some(thread) = self.thread.lock().take() {
            if thread.join().is_err() {
                log::error!("the sentinel watcher thread panicked");
            }
        }
    }
}

/// The watcher's body: subscribes on one sentinel after another until stopped.
fn watch(
    locator: &MasterLocator,
    on_switch: &SwitchHook,
    stopping: &AtomicBool,
    stopped: &Receiver<()>,
) {
    let mut backoff = Duration::from_millis(10);
    while !stopping.load(Ordering::Acquire) {
        let sentinels = locator.sentinels.lock().clone();
        for sentinel in &sentinels {
            if stopping.load(Ordering::Acquire) {
                return;
            }
            match listen(locator, sentinel, on_switch, stopping) {
                Ok(()) => backoff = Duration::from_millis(10),
                Err(err) => log::debug!("sentinel {} lost: {err}", sentinel.addr()),
            }
        }
        // Every sentinel failed: pause, unless told to stop.
        let _ = stopped.recv_timeout(backoff);
        backoff = (backoff * 2).min(WATCHER_MAX_BACKOFF);
    }
}

/// Subscribes to `+switch-master` on `sentinel` and follows its messages until the
/// connection fails or the watcher stops. A switch missed while not subscribed is caught by
/// asking once the subscription stands.
fn listen(
    locator: &MasterLocator,
    sentinel: &ConnectionInfo,
    on_switch: &SwitchHook,
    stopping: &AtomicBool,
) -> Result<()> {
    let timeout = locator.response_timeout;
    let mut connection = locator.connect(sentinel)?;
    let mut pubsub = connection.as_pubsub();
    pubsub
        .subscribe("+switch-master")
        .map_err(|err| Error::from_redis(err, timeout))?;
    pubsub
        .set_read_timeout(Some(WATCHER_POLL))
        .map_err(|err| Error::from_redis(err, timeout))?;
    if let Ok(master) = locator.ask(sentinel) {
        if master.is_some_and(|master| locator.settle(master)) {
            on_switch();
        }
    }
    while !stopping.load(Ordering::Acquire) {
        let message = match pubsub.get_message() {
            Ok(message) => message,
            Err(err) if err.is_timeout() => continue,
            Err(err) => return Err(Error::from_redis(err, timeout)),
        };
        let payload: String = match message.get_payload() {
            Ok(payload) => payload,
            Err(_) => continue,
        };
        // `<master-name> <old-ip> <old-port> <new-ip> <new-port>`
        let words: Vec<&str> = payload.split(' ').collect();
        if let [name, _, _, host, port] = words[..] {
            if name != locator.master_name() {
                continue;
            }
            match port.parse() {
                Ok(port) if locator.switched_to(host.to_owned(), port) => on_switch(),
                Ok(_) => {}
                Err(_) => log::debug!("ignoring a malformed +switch-master: {payload:?}"),
            }
        }
    }
    Ok(())
}
