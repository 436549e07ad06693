//! The pub/sub hub: one listener thread and one subscribed connection per manager, serving
//! every waiting thread of the process.
//!
//! A waiter [`subscribe`](PubSubHub::subscribe)s to the release channel of a lock and gets a
//! [`Subscription`] once Redis has confirmed it, so a release published after that point is
//! never missed. Subscriptions to one channel are shared and counted: the first waiter sends
//! `SUBSCRIBE`, the last one to leave sends `UNSUBSCRIBE`. Several lock names can share one
//! channel (`x` and `{x}` both use `redisson_lock__channel:{x}`), and a message does not say
//! which lock was freed, so a release message (`0`) wakes one waiter of each lock name on the
//! channel (as Redisson keeps one entry per lock name); a read-lock release (`1`) wakes all.
//!
//! Commands are written by the waiting threads on a clone of the socket; only the listener
//! thread reads, with the incremental parser of [`resp`], so a subscription costs one round
//! trip and no hand-off to the listener. When the connection drops (or stops answering
//! pings) the listener reconnects, subscribes again to every channel that has waiters, and
//! wakes all waiters, which retry at once: a release may have gone by unseen.
//!
//! Besides the release channels, the hub stays subscribed to one [`Notices`] channel for as
//! long as it runs, and hands every message on it to the notice handler (on the listener
//! thread, outside the hub's lock).

mod resp;

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use redis::{ConnectionAddr, ConnectionInfo};

use crate::error::{Error, Result};
use crate::resolve::{ResolveError, Resolver};
use resp::Frame;

/// How often the listener wakes up when nothing arrives, to check its keep-alive ping.
const LISTENER_TICK: Duration = Duration::from_millis(500);
/// The longest pause between two connection attempts while Redis is unreachable.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);
/// A connection that lasted this long was healthy: the next reconnection starts fast again.
const HEALTHY_CONNECTION: Duration = Duration::from_secs(1);

/// Handles one message of the notice channel.
pub(crate) type NoticeHandler = Box<dyn Fn(&[u8]) + Send + Sync>;

/// The channel the hub always listens to, and what to do with its messages.
pub(crate) struct Notices {
    pub(crate) channel: String,
    pub(crate) handler: NoticeHandler,
}

pub(crate) struct PubSubHub {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a subscription is confirmed, the connection comes or goes, or the hub
    /// stops.
    changed: Condvar,
    endpoint: Endpoint,
    notices: Notices,
    connect_timeout: Duration,
    response_timeout: Duration,
}

#[derive(Default)]
struct State {
    channels: HashMap<String, Channel>,
    /// The write side of the subscribed connection, while there is one.
    writer: Option<Stream>,
    /// Redis has answered (confirmed or refused) the subscription to the notice channel on
    /// this connection.
    notices_answered: bool,
    stopping: bool,
}

#[derive(Default)]
struct Channel {
    /// In the order they are woken: a woken waiter moves to the back.
    waiters: VecDeque<Arc<Waiter>>,
    /// `SUBSCRIBE`/`UNSUBSCRIBE` commands sent whose confirmation has not arrived yet.
    unconfirmed: u32,
    /// The last command sent for this channel was `SUBSCRIBE`.
    subscribed: bool,
    /// ... and Redis has confirmed it.
    confirmed: bool,
}

struct Waiter {
    /// The lock name it waits for.
    lock: String,
    wake: Sender<()>,
    woken: Receiver<()>,
}

impl Waiter {
    fn new(lock: &str) -> Self {
        let (wake, woken) = crossbeam_channel::bounded(1);
        Waiter {
            lock: lock.to_owned(),
            wake,
            woken,
        }
    }

    fn has_pending_wake(&self) -> bool {
        !self.woken.is_empty()
    }
}

/// A waiting thread's membership in the subscription to one channel; leaving is dropping it.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    waiter: Arc<Waiter>,
}

impl Subscription {
    /// Whether Redis has confirmed the subscription and the connection still stands: only
    /// then will a release wake this waiter.
    pub(crate) fn is_live(&self) -> bool {
        let state = self.shared.state.lock();
        state.writer.is_some()
            && state
                .channels
                .get(&self.channel)
                .is_some_and(|channel| channel.confirmed)
    }

    /// Sleeps until this waiter is woken or `timeout` passes; answers whether it was woken.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        self.waiter.woken.recv_timeout(timeout).is_ok()
    }

    /// The receiver that gets this waiter's wakes, to wait on several subscriptions at once.
    pub(crate) fn woken(&self) -> &Receiver<()> {
        &self.waiter.woken
    }

    /// Gives back a wake this waiter took and will not use; on leaving, it goes to another
    /// waiter.
    pub(crate) fn pass_wake_on(&self) {
        wake(&self.waiter);
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.shared.leave(&self.channel, &self.waiter);
    }
}

impl PubSubHub {
    pub(crate) fn start(
        info: &ConnectionInfo,
        resolver: Option<Arc<Resolver>>,
        connect_timeout: Duration,
        response_timeout: Duration,
        notices: Notices,
    ) -> Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            endpoint: Endpoint::from_info(info, resolver)?,
            notices,
            connect_timeout,
            response_timeout,
        });
        let thread = std::thread::Builder::new()
            .name("redlease-pubsub".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || shared.run()
            })
            .map_err(Error::ThreadSpawn)?;
        // Give the first connection a chance, so the first waiters find a live subscription
        // and no notice is missed from the start.
        let ready_by = Instant::now() + connect_timeout;
        let mut state = shared.state.lock();
        while !state.notices_answered
            && !shared.changed.wait_until(&mut state, ready_by).timed_out()
        {}
        drop(state);
        Ok(PubSubHub {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Joins the waiters for `lock` on its release `channel`; returns once Redis confirmed
    /// the subscription, or after the response timeout, or at once while there is no
    /// connection (check [`Subscription::is_live`]).
    pub(crate) fn subscribe(&self, channel: &str, lock: &str) -> Result<Subscription> {
        let shared = &self.shared;
        let waiter = Arc::new(Waiter::new(lock));
        let mut state = shared.state.lock();
        if state.stopping {
            return Err(Error::ShutDown);
        }
        let State {
            channels, writer, ..
        } = &mut *state;
        let entry = channels.entry(channel.to_owned()).or_default();
        entry.waiters.push_back(Arc::clone(&waiter));
        if !entry.subscribed && send(writer, "SUBSCRIBE", channel) {
            entry.subscribed = true;
            entry.unconfirmed += 1;
        }
        let give_up_at = Instant::now() + shared.response_timeout;
        loop {
            let confirmed = state
                .channels
                .get(channel)
                .is_some_and(|entry| entry.confirmed);
            if confirmed || state.writer.is_none() || state.stopping {
                break;
            }
            if shared
                .changed
                .wait_until(&mut state, give_up_at)
                .timed_out()
            {
                break;
            }
        }
        Ok(Subscription {
            shared: Arc::clone(shared),
            channel: channel.to_owned(),
            waiter,
        })
    }

    /// How many channels the hub is subscribed to, or busy subscribing or unsubscribing.
    pub(crate) fn channel_count(&self) -> usize {
        self.shared.state.lock().channels.len()
    }

    /// Stops and joins the listener thread; waiters fall back to their PTTL hints.
    pub(crate) fn stop(&self) {
        {
            let mut state = self.shared.state.lock();
            state.stopping = true;
            if let Some(writer) = &state.writer {
                let _ = writer.shutdown();
            }
        }
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.lock().take() {
            if thread.join().is_err() {
                log::error!("the pub/sub listener thread panicked");
            }
        }
    }
}

impl Shared {
    fn leave(&self, channel: &str, waiter: &Arc<Waiter>) {
        let mut state = self.state.lock();
        let State {
            channels, writer, ..
        } = &mut *state;
        let Some(entry) = channels.get_mut(channel) else {
            return;
        };
        entry.waiters.retain(|other| !Arc::ptr_eq(other, waiter));
        if waiter.woken.try_recv().is_ok() {
            // It was woken for a release it will not use: pass the wake on to a waiter of
            // the same lock.
            wake_one_of(entry, &waiter.lock);
        }
        if !entry.waiters.is_empty() {
            return;
        }
        if entry.subscribed && send(writer, "UNSUBSCRIBE", channel) {
            entry.subscribed = false;
            entry.confirmed = false;
            entry.unconfirmed += 1;
        } else if entry.unconfirmed == 0 || writer.is_none() {
            channels.remove(channel);
        }
    }

    fn run(&self) {
        let mut reconnect_delay = Duration::from_millis(10);
        loop {
            if self.state.lock().stopping {
                return;
            }
            match self.endpoint.connect(self.connect_timeout) {
                Ok(stream) => {
                    let connected_at = Instant::now();
                    if let Err(err) = self.serve(stream) {
                        log::debug!("pub/sub connection lost: {err}");
                    }
                    self.disconnected();
                    // A server that accepts and then refuses at once must not make us spin.
                    if connected_at.elapsed() >= HEALTHY_CONNECTION {
                        reconnect_delay = Duration::from_millis(10);
                    } else {
                        reconnect_delay = (reconnect_delay * 2).min(MAX_RECONNECT_DELAY);
                    }
                }
                Err(err) => {
                    log::debug!("pub/sub connection failed: {err}");
                    reconnect_delay = (reconnect_delay * 2).min(MAX_RECONNECT_DELAY);
                }
            }
            let mut state = self.state.lock();
            if !state.stopping {
                self.changed.wait_for(&mut state, reconnect_delay);
            }
        }
    }

    /// Subscribes to the notice channel and again to every channel with waiters, then reads
    /// until the connection ends.
    fn serve(&self, mut reader: Stream) -> io::Result<()> {
        reader.set_write_timeout(Some(self.response_timeout))?;
        let writer = reader.try_clone()?;
        {
            let mut state = self.state.lock();
            if state.stopping {
                return Ok(());
            }
            let mut names = Vec::new();
            state.channels.retain(|name, channel| {
                channel.confirmed = false;
                channel.subscribed = !channel.waiters.is_empty();
                channel.unconfirmed = u32::from(channel.subscribed);
                if channel.subscribed {
                    names.push(name.clone());
                }
                channel.subscribed
            });
            let mut writer = Some(writer);
            // On its own: an ACL that refuses it must not refuse the release channels too.
            if !send(&mut writer, "SUBSCRIBE", &self.notices.channel) {
                return Err(io::Error::other("cannot send SUBSCRIBE"));
            }
            if !names.is_empty() && !send(&mut writer, "SUBSCRIBE", &names) {
                return Err(io::Error::other("cannot send SUBSCRIBE"));
            }
            state.writer = writer;
            wake_everyone(&mut state);
        }
        self.changed.notify_all();

        reader.set_read_timeout(Some(LISTENER_TICK))?;
        let mut buffer = Vec::with_capacity(4096);
        let mut chunk = [0u8; 4096];
        let mut last_heard = Instant::now();
        let mut ping_sent_at: Option<Instant> = None;
        loop {
            match reader.read(&mut chunk) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(read) => {
                    buffer.extend_from_slice(&chunk[..read]);
                    last_heard = Instant::now();
                    ping_sent_at = None;
                    self.handle_frames(&mut buffer)?;
                }
                Err(err)
                    if matches!(
                        err.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    let mut state = self.state.lock();
                    if state.stopping {
                        return Ok(());
                    }
                    match ping_sent_at {
                        Some(at) if at.elapsed() > self.response_timeout => {
                            return Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "redis did not answer a ping",
                            ));
                        }
                        None if last_heard.elapsed() >= self.response_timeout => {
                            if !send(&mut state.writer, "PING", &[] as &[&str]) {
                                return Err(io::Error::other("cannot send PING"));
                            }
                            ping_sent_at = Some(Instant::now());
                        }
                        _ => {}
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
    }

    fn handle_frames(&self, buffer: &mut Vec<u8>) -> io::Result<()> {
        let mut used = 0;
        let mut state = self.state.lock();
        let mut confirmed_any = false;
        let mut notices = Vec::new();
        while let Some((frame, length)) =
            resp::parse(&buffer[used..]).map_err(|err| io::Error::other(err.0))?
        {
            used += length;
            match handle_frame(&mut state, frame, &self.notices.channel)? {
                Handled::Confirmed => confirmed_any = true,
                Handled::Notice(payload) => notices.push(payload),
                Handled::Nothing => {}
            }
        }
        drop(state);
        buffer.drain(..used);
        if confirmed_any {
            self.changed.notify_all();
        }
        for payload in notices {
            (self.notices.handler)(&payload);
        }
        Ok(())
    }

    fn disconnected(&self) {
        {
            let mut state = self.state.lock();
            if let Some(writer) = state.writer.take() {
                let _ = writer.shutdown();
            }
            state.notices_answered = false;
            state.channels.retain(|_, channel| {
                channel.subscribed = false;
                channel.confirmed = false;
                channel.unconfirmed = 0;
                !channel.waiters.is_empty()
            });
            // Their subscriptions are gone: let them retry now and poll until the next one.
            wake_everyone(&mut state);
        }
        self.changed.notify_all();
    }
}

/// What one frame from the subscribed connection called for.
enum Handled {
    Nothing,
    /// A subscription was confirmed: waiters blocked in `subscribe` may go on.
    Confirmed,
    /// A message on the notice channel, for the handler.
    Notice(Vec<u8>),
}

/// Acts on one frame from the subscribed connection.
fn handle_frame(state: &mut State, frame: Frame, notice_channel: &str) -> io::Result<Handled> {
    let items = match frame {
        Frame::Array(Some(items)) => items,
        Frame::Error(message) => {
            // A refused command (an ACL without the channel): its subscription stays
            // unconfirmed and its waiters poll. The notice channel is subscribed first, so a
            // refusal before its answer is its own.
            let message = String::from_utf8_lossy(&message);
            if !state.notices_answered {
                state.notices_answered = true;
                log::warn!(
                    "force-release notices unavailable (grant the channel {notice_channel}): \
                     {message}; holders learn of force releases at their next renewal"
                );
                return Ok(Handled::Confirmed);
            }
            log::warn!("redis refused a pub/sub command: {message}");
            return Ok(Handled::Nothing);
        }
        _ => return Ok(Handled::Nothing), // +PONG outside subscribed mode
    };
    let kind = items.first().and_then(Frame::as_bytes).unwrap_or_default();
    let channel = items.get(1).and_then(Frame::as_bytes).unwrap_or_default();
    let channel = String::from_utf8_lossy(channel);
    let payload = || items.get(2).and_then(Frame::as_bytes).unwrap_or_default();
    match kind {
        b"message" if channel == notice_channel => Ok(Handled::Notice(payload().to_vec())),
        b"message" => {
            if let Some(entry) = state.channels.get_mut(&*channel) {
                if payload() == b"1" {
                    entry.waiters.iter().for_each(|waiter| wake(waiter));
                } else {
                    wake_one_per_lock(entry);
                }
            }
            Ok(Handled::Nothing)
        }
        b"subscribe" if channel == notice_channel => {
            state.notices_answered = true;
            Ok(Handled::Confirmed)
        }
        b"subscribe" | b"unsubscribe" => {
            let Some(entry) = state.channels.get_mut(&*channel) else {
                return Ok(Handled::Nothing);
            };
            entry.unconfirmed = entry.unconfirmed.saturating_sub(1);
            if entry.unconfirmed > 0 {
                return Ok(Handled::Nothing);
            }
            if entry.subscribed {
                entry.confirmed = true;
                return Ok(Handled::Confirmed);
            }
            if entry.waiters.is_empty() {
                state.channels.remove(&*channel);
            }
            Ok(Handled::Nothing)
        }
        _ => Ok(Handled::Nothing), // "pong"
    }
}

/// Wakes, for each lock name waited for on the channel, its first waiter that has no wake
/// pending, and moves the woken to the back.
fn wake_one_per_lock(channel: &mut Channel) {
    let mut locks: Vec<String> = Vec::new();
    for waiter in &channel.waiters {
        if !locks.contains(&waiter.lock) {
            locks.push(waiter.lock.clone());
        }
    }
    for lock in &locks {
        wake_one_of(channel, lock);
    }
}

/// Wakes the first waiter for `lock` that has no wake pending, and moves it to the back.
fn wake_one_of(channel: &mut Channel, lock: &str) {
    let position = channel
        .waiters
        .iter()
        .position(|waiter| waiter.lock == lock && !waiter.has_pending_wake());
    if let Some(waiter) = position.and_then(|position| channel.waiters.remove(position)) {
        wake(&waiter);
        channel.waiters.push_back(waiter);
    }
}

fn wake(waiter: &Waiter) {
    let _ = waiter.wake.try_send(());
}

fn wake_everyone(state: &mut State) {
    for channel in state.channels.values() {
        channel.waiters.iter().for_each(|waiter| wake(waiter));
    }
}

/// Writes one command; on failure shuts the connection so the listener reconnects. Answers
/// whether the command went out.
fn send(writer: &mut Option<Stream>, command: &str, args: impl redis::ToRedisArgs) -> bool {
    let Some(stream) = writer else {
        return false;
    };
    let packed = redis::cmd(command).arg(args).get_packed_command();
    match stream.write_all(&packed) {
        Ok(()) => true,
        Err(err) => {
            log::debug!("pub/sub {command} failed: {err}");
            let _ = stream.shutdown();
            *writer = None;
            false
        }
    }
}

/// Where the subscribed connection goes, and how it authenticates.
struct Endpoint {
    address: Address,
    username: Option<String>,
    password: Option<String>,
}

enum Address {
    /// A host and port, looked up through the manager's resolver.
    Tcp(Arc<Resolver>),
    #[cfg(unix)]
    Unix(PathBuf),
}

impl Endpoint {
    fn from_info(info: &ConnectionInfo, resolver: Option<Arc<Resolver>>) -> Result<Self> {
        let address = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                Address::Tcp(resolver.unwrap_or_else(|| Arc::new(Resolver::new(host, *port))))
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Address::Unix(path.clone()),
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unsupported redis address {other}: use redis:// or redis+unix://"
                )))
            }
        };
        let settings = info.redis_settings();
        Ok(Endpoint {
            address,
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
        })
    }

    fn connect(&self, timeout: Duration) -> io::Result<Stream> {
        let mut stream = match &self.address {
            Address::Tcp(resolver) => {
                // The lookup and the TCP connect share the timeout.
                let give_up_at = Instant::now() + timeout;
                let addresses = resolver
                    .resolve(timeout)
                    .map_err(ResolveError::into_io_error)?;
                let mut last_error = None;
                let mut connected = None;
                for address in addresses {
                    let left = give_up_at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match TcpStream::connect_timeout(&address, left) {
                        Ok(stream) => {
                            connected = Some(stream);
                            break;
                        }
                        Err(err) => last_error = Some(err),
                    }
                }
                let stream = match (connected, last_error) {
                    (Some(stream), _) => stream,
                    (None, Some(err)) => {
                        // The name may have moved (a failover): look it up again next time.
                        resolver.distrust_cache();
                        return Err(err);
                    }
                    (None, None) => {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "no time left to connect after the host name lookup",
                        ))
                    }
                };
                stream.set_nodelay(true)?;
                Stream::Tcp(stream)
            }
            #[cfg(unix)]
            Address::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
        };
        if let Some(password) = &self.password {
            stream.set_read_timeout(Some(timeout))?;
            stream.set_write_timeout(Some(timeout))?;
            let mut auth = redis::cmd("AUTH");
            if let Some(username) = &self.username {
                auth.arg(username);
            }
            stream.write_all(&auth.arg(password).get_packed_command())?;
            let mut buffer = Vec::new();
            let mut chunk = [0u8; 512];
            let answer = loop {
                let read = stream.read(&mut chunk)?;
                if read == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                buffer.extend_from_slice(&chunk[..read]);
                if let Some((frame, _)) = resp::parse(&buffer).map_err(|e| io::Error::other(e.0))? {
                    break frame;
                }
            };
            if let Frame::Error(message) = answer {
                let message = String::from_utf8_lossy(&message);
                return Err(io::Error::other(format!("AUTH refused: {message}")));
            }
        }
        Ok(stream)
    }
}

/// A TCP or Unix socket, split into a reading and a writing handle with `try_clone`.
enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(stream) => Stream::Tcp(stream.try_clone()?),
            #[cfg(unix)]
            Stream::Unix(stream) => Stream::Unix(stream.try_clone()?),
        })
    }

    /// Ends the connection for both handles; a blocked read returns at once.
    fn shutdown(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.shutdown(Shutdown::Both),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.shutdown(Shutdown::Both),
        }
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.set_read_timeout(timeout),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.set_read_timeout(timeout),
        }
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.set_write_timeout(timeout),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.set_write_timeout(timeout),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buffer),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.read(buffer),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(buffer),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.write(buffer),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.flush(),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.flush(),
        }
    }
}
