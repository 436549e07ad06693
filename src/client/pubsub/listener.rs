//! The listener thread: connects (again, with backoff, after every loss), subscribes anew,
//! reads the subscribed connection, pings it when it falls silent, and dispatches each frame
//! to the hub's bookkeeping.
//!
//! It is the only reader of the connection. It touches the hub's state under its lock for
//! each batch of frames, queues its own commands (re-subscriptions, pings) through the
//! outbox like any other thread, and calls the notice handler outside the lock. A frame that
//! breaks the protocol ends the connection like any read error: the listener reconnects. In
//! cluster mode it tells the cluster's hubs (outside every lock) when its node cannot be
//! reached, as the cluster's map may be out of date.
//!
//! What Redis refuses is recorded for the threads that wait for it: a refused login for
//! [`PubSub::start`](super::PubSub::start), which fails the manager's build; a refused
//! subscription for the waiters that wait for its answer, which fail with it (those
//! subscribed before, on an earlier connection, poll). The listener goes on either way: it
//! retries the login with its backoff, and a later waiter asks for the subscription again.

use std::io;
use std::time::{Duration, Instant};

use super::channels::{is_redirection, Mode, Sent, State};
use super::hub::Shared;
use super::transport::connection::Stream;
use super::transport::frame::{self, Frame};
use super::LoginRefused;

/// How often the listener wakes up when nothing arrives, to check its keep-alive ping.
const LISTENER_TICK: Duration = Duration::from_millis(500);
/// The longest pause between two connection attempts while Redis is unreachable.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);
/// The first pause, and the one after a connection that was healthy.
const MIN_RECONNECT_DELAY: Duration = Duration::from_millis(10);
/// A connection that lasted this long was healthy: the next reconnection starts fast again.
const HEALTHY_CONNECTION: Duration = Duration::from_secs(1);

impl Shared {
    /// The listener thread's body: runs until the hub stops.
    pub(super) fn run(&self) {
        let mut reconnect_delay = MIN_RECONNECT_DELAY;
        loop {
            if self.state.lock().is_stopping() {
                return;
            }
            match self.endpoint.connect(self.connect_timeout) {
                Ok(stream) => {
                    let connected_at = Instant::now();
                    if let Err(err) = self.serve(stream) {
                        log::debug!("pub/sub connection lost: {err}");
                    }
                    let stopping = {
                        let mut state = self.state.lock();
                        state.disconnected();
                        state.is_stopping()
                    };
                    self.changed.notify_all();
                    if !stopping {
                        self.in_trouble();
                    }
                    // A server that accepts and then refuses at once must not make us spin.
                    if connected_at.elapsed() >= HEALTHY_CONNECTION {
                        reconnect_delay = MIN_RECONNECT_DELAY;
                    } else {
                        reconnect_delay = (reconnect_delay * 2).min(MAX_RECONNECT_DELAY);
                    }
                }
                Err(err) => {
                    self.connect_failed(&err);
                    self.in_trouble();
                    reconnect_delay = (reconnect_delay * 2).min(MAX_RECONNECT_DELAY);
                }
            }
            let mut state = self.state.lock();
            if !state.is_stopping() {
                self.changed.wait_for(&mut state, reconnect_delay);
            }
        }
    }

    /// Tells the cluster's hubs, if any, that the node could not be reached: the cluster's map
    /// may be out of date.
    fn in_trouble(&self) {
        if let Some(on_trouble) = &self.on_trouble {
            on_trouble();
        }
    }

    /// Records the failed attempt, and a refused login where `start` looks for it, and warns
    /// of it once per run of refusals (the listener keeps trying: the password may be
    /// fixed); any other failure is only logged, as the next attempt may well succeed.
    fn connect_failed(&self, err: &io::Error) {
        self.state.lock().attempt_failed();
        self.changed.notify_all();
        let refused = err
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<LoginRefused>());
        match refused {
            Some(refused) if refused.is_about_credentials() => {
                let LoginRefused(reply) = refused;
                let newly = self.state.lock().login_refused(reply);
                self.changed.notify_all();
                if newly {
                    log::warn!("redis refused the pub/sub connection's login: {reply}");
                }
            }
            _ => log_connect_failure(err),
        }
    }

    /// Subscribes to the notice channel and again to every channel with waiters, then reads
    /// until the connection ends.
    fn serve(&self, reader: Stream) -> io::Result<()> {
        let writer = reader.try_clone()?;
        {
            let mut state = self.state.lock();
            if state.is_stopping() {
                return Ok(());
            }
            state.connected(writer, &self.notice_channel);
        }
        self.changed.notify_all();
        self.flush();

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
                    if state.is_stopping() {
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
                            if !state.queue_ping() {
                                return Err(io::Error::other("the connection was closed"));
                            }
                            drop(state);
                            ping_sent_at = Some(Instant::now());
                            self.flush();
                        }
                        _ => {}
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
    }

    /// Acts on every complete frame in `buffer` and removes them from it.
    fn handle_frames(&self, buffer: &mut Vec<u8>) -> io::Result<()> {
        let mut used = 0;
        let mut answered_any = false;
        let mut notices = Vec::new();
        let mut state = self.state.lock();
        let had_channels = state.channel_count() > 0;
        let parsed = loop {
            match frame::parse(&buffer[used..]) {
                Ok(Some((frame, length))) => {
                    used += length;
                    match dispatch(&mut state, frame, &self.notice_channel) {
                        Handled::Answered => answered_any = true,
                        Handled::Notice(payload) => notices.push(payload),
                        Handled::Nothing => {}
                    }
                }
                Ok(None) => break Ok(()),
                Err(err) => break Err(io::Error::new(io::ErrorKind::InvalidData, err.0)),
            }
        };
        // The answer to the last `UNSUBSCRIBE` (or a refusal) took the last channel away.
        let unused = had_channels && state.channel_count() == 0;
        drop(state);
        buffer.drain(..used);
        // What came before a corrupt frame was sound: its answers and notices count.
        if answered_any {
            self.changed.notify_all();
        }
        for payload in notices {
            (self.notice_handler)(&payload);
        }
        if unused {
            self.no_channel_left();
        }
        parsed
    }
}

/// Logs why connecting failed: a TLS failure (a certificate, a host name, a server that does
/// not speak TLS) as a warning, as it will not go away by itself; anything else for debugging.
fn log_connect_failure(err: &io::Error) {
    #[cfg(feature = "tls")]
    if let Some(tls_failure) = crate::error::failure_of_io_error(err) {
        log::warn!("pub/sub connection failed: {tls_failure}");
        return;
    }
    log::debug!("pub/sub connection failed: {err}");
}

/// What one frame from the subscribed connection called for.
enum Handled {
    Nothing,
    /// A subscription was confirmed or refused: waiters blocked in `subscribe` (or in
    /// `start`) may go on.
    Answered,
    /// A message on the notice channel, for the handler.
    Notice(Vec<u8>),
}

/// Acts on one frame from the subscribed connection. Release channels speak in the hub's
/// mode (`message` or `smessage`, and so on); the notice channel is always a plain one.
fn dispatch(state: &mut State, frame: Frame, notice_channel: &str) -> Handled {
    let items = match frame {
        Frame::Array(Some(items)) => items,
        Frame::Error(reply) => {
            return refused(state, &String::from_utf8_lossy(&reply), notice_channel)
        }
        Frame::Simple(_) => {
            // +PONG outside subscribed mode (the notice channel was refused).
            state.answer_arrived(|sent| matches!(sent, Sent::Ping));
            return Handled::Nothing;
        }
        _ => return Handled::Nothing,
    };
    let kind = items.first().and_then(Frame::as_bytes).unwrap_or_default();
    let channel = items.get(1).and_then(Frame::as_bytes).unwrap_or_default();
    let channel = String::from_utf8_lossy(channel);
    let payload = || items.get(2).and_then(Frame::as_bytes).unwrap_or_default();
    let mode = state.mode();
    match kind {
        b"message" if channel == notice_channel => Handled::Notice(payload().to_vec()),
        b"subscribe" if channel == notice_channel => {
            state.answer_arrived(|sent| matches!(sent, Sent::Notices));
            state.notices_now_answered();
            Handled::Answered
        }
        kind if kind == mode.message_kind() => {
            state.released(&channel, payload());
            Handled::Nothing
        }
        kind if kind == mode.subscribed_kind() => {
            state.answer_arrived(|sent| matches!(sent, Sent::Subscribe(due) if *due == channel));
            answered_if(state.subscription_answered(&channel))
        }
        kind if kind == mode.unsubscribed_kind() => answered_if(state.unsubscribed(&channel)),
        b"pong" => {
            state.answer_arrived(|sent| matches!(sent, Sent::Ping));
            Handled::Nothing
        }
        _ => Handled::Nothing,
    }
}

/// [`Handled::Answered`] when waiters blocked on a channel may go on.
fn answered_if(answered: bool) -> Handled {
    if answered {
        Handled::Answered
    } else {
        Handled::Nothing
    }
}

/// Acts on an error reply: Redis refused the oldest command awaiting its answer.
fn refused(state: &mut State, reply: &str, notice_channel: &str) -> Handled {
    let redirected = state.mode() == Mode::Sharded && is_redirection(reply);
    match state.refused(reply) {
        Some(Sent::Notices) => {
            log::warn!(
                "force-release notices unavailable (grant the channel {notice_channel}): \
                 {reply}; holders learn of force releases at their next renewal"
            );
            Handled::Answered
        }
        Some(Sent::Subscribe(channel)) if redirected => {
            log::debug!("subscription to {channel:?} sent elsewhere: {reply}");
            Handled::Answered
        }
        Some(Sent::Subscribe(channel)) => {
            log::warn!(
                "redis refused to subscribe to {channel:?}: {reply}; a thread waiting for \
                 the subscription fails with this, one subscribed before polls"
            );
            Handled::Answered
        }
        Some(Sent::Unsubscribe(channel)) if redirected => {
            // The slot left the node, which ended the subscription already.
            log::debug!("unsubscribed from {channel:?} elsewhere: {reply}");
            Handled::Nothing
        }
        Some(Sent::Unsubscribe(channel)) => {
            log::warn!("redis refused to unsubscribe from {channel:?}: {reply}");
            Handled::Nothing
        }
        Some(Sent::Ping) => {
            log::warn!("redis refused the pub/sub connection's ping: {reply}");
            Handled::Nothing
        }
        // The node's answer to a `SUNSUBSCRIBE` whose answer was taken already (see the
        // module doc of `hub`).
        None if redirected => {
            log::debug!("redis answered the pub/sub connection with an error: {reply}");
            Handled::Nothing
        }
        None => {
            log::warn!("redis answered the pub/sub connection with an error: {reply}");
            Handled::Nothing
        }
    }
}
