//! The pub/sub hub: one listener thread and one subscribed connection per manager, serving
//! every waiting thread of the process.
//!
//! A waiter [`subscribe`](PubSubHub::subscribe)s to the release channel of a lock and gets a
//! [`Subscription`] once Redis has confirmed it, so a release published after that point is
//! never missed. Subscriptions to one channel are shared and counted: the first waiter sends
//! `SUBSCRIBE`, the last one to leave sends `UNSUBSCRIBE`. When the connection drops (or
//! stops answering pings) the listener reconnects, subscribes again to every channel that
//! has waiters, and wakes all waiters, which retry at once: a release may have gone by
//! unseen. Besides the release channels, the hub stays subscribed to one [`Notices`] channel
//! for as long as it runs, and hands every message on it to the notice handler (on the
//! listener thread, outside the hub's lock).
//!
//! What Redis refuses: a refused login, or a refused `SUBSCRIBE` command (not just the
//! notice channel), on the first connection fails [`PubSubHub::start`], and with it the
//! manager's build: no waiter could ever be woken. A refused notice channel only costs the
//! notices. A refused release channel fails the waiter that asked for it, with the typed
//! error, at once: a misconfigured ACL shows up at the first wait that needs it, instead
//! of as waiters that quietly poll. Waiters already subscribed when a later connection is
//! refused (the ACL changed under a running manager) poll, as they do while the connection
//! is down.
//!
//! The parts, each in its own module:
//! - [`hub`]: the bookkeeping under the hub's one lock (channels, waiters, counts, wake
//!   rules); no I/O.
//! - [`outbox`]: commands queued under that lock and written outside it, in order, by one
//!   thread at a time, so a stalled write holds up no one else.
//! - [`listener`]: the thread that connects, reads, pings and dispatches frames.
//! - [`connection`]: the socket, the address and `AUTH`.
//! - [`tls`]: for `rediss://`, the TLS session that the reading and the writing handles of
//!   the connection share.
//! - [`frame`]: the RESP2 parser, total on any input.
//!
//! This module holds the types the rest of the crate uses and the glue between them.

mod connection;
mod frame;
mod hub;
mod listener;
mod outbox;
#[cfg(test)]
mod tests;
#[cfg(feature = "tls")]
mod tls;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use parking_lot::{Condvar, Mutex};
use redis::ConnectionInfo;

use crate::error::{Error, Permission, Result};
use crate::resolve::Resolver;
use crate::sentinel::MasterLocator;
use crate::tls::TlsConnector;
use connection::Endpoint;
use hub::{State, Waiter};

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

pub(crate) struct PubSubHub {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What the listener thread and the waiting threads share.
struct Shared {
    state: Mutex<State>,
    /// Signalled when a subscription is confirmed, the connection comes or goes, or the hub
    /// stops.
    changed: Condvar,
    endpoint: Endpoint,
    /// The user the connection logs in as, for errors; `None` for Redis's default user.
    user: Option<String>,
    notices: Notices,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl Shared {
    /// Why no waiter could use the hub, from what Redis answered on the first connection:
    /// it refused the login, or the `SUBSCRIBE` command itself (an ACL without the notice
    /// channel only costs the notices).
    fn unusable(&self, state: &State) -> Option<Error> {
        let user = || self.user.clone();
        if state.login_refusal().is_some() {
            // Whatever the words: `WRONGPASS`, or `ERR` for a password where none is set.
            return Some(Error::AuthenticationFailed { user: user() });
        }
        match Error::from_reply(state.notices_refusal()?) {
            Error::AuthenticationFailed { .. } => {
                Some(Error::AuthenticationFailed { user: user() })
            }
            err @ Error::PermissionDenied {
                permission: Permission::Command(_),
                ..
            } => Some(err),
            _ => None,
        }
    }

    /// Writes the commands queued in the outbox, outside the hub's lock (or leaves them to
    /// the thread writing already).
    fn flush(&self) {
        outbox::flush(&self.state, self.response_timeout);
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
        state.is_connected() && state.is_confirmed(&self.channel)
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
        self.waiter.wake();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let queued = self.shared.state.lock().leave(&self.channel, &self.waiter);
        if queued {
            self.shared.flush();
        }
    }
}

impl PubSubHub {
    pub(crate) fn start(
        info: &ConnectionInfo,
        resolver: Option<Arc<Resolver>>,
        located: Option<Arc<MasterLocator>>,
        tls: Option<TlsConnector>,
        connect_timeout: Duration,
        response_timeout: Duration,
        notices: Notices,
    ) -> Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            endpoint: Endpoint::from_info(info, resolver, located, tls)?,
            user: info.redis_settings().username().map(str::to_owned),
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
        while !state.notices_answered()
            && state.login_refusal().is_none()
            && !shared.changed.wait_until(&mut state, ready_by).timed_out()
        {}
        let unusable = shared.unusable(&state);
        drop(state);
        let hub = PubSubHub {
            shared,
            thread: Mutex::new(Some(thread)),
        };
        match unusable {
            Some(err) => {
                hub.stop();
                Err(err)
            }
            None => Ok(hub),
        }
    }

    /// Joins the waiters for `lock` on its release `channel`; returns once Redis confirmed
    /// the subscription, or after the response timeout, or at once while there is no
    /// connection (check [`Subscription::is_live`]). Fails with Redis's refusal
    /// ([`Error::PermissionDenied`] for an ACL without the channel) once Redis refused it.
    pub(crate) fn subscribe(&self, channel: &str, lock: &str) -> Result<Subscription> {
        self.join(channel, Some(lock))
    }

    /// Like [`subscribe`](PubSubHub::subscribe), for a waiter that every message on
    /// `channel` wakes (the waiters of a latch or a semaphore, where one message may let many
    /// through).
    pub(crate) fn subscribe_to_every_message(&self, channel: &str) -> Result<Subscription> {
        self.join(channel, None)
    }

    fn join(&self, channel: &str, lock: Option<&str>) -> Result<Subscription> {
        let shared = &self.shared;
        let give_up_at = Instant::now() + shared.response_timeout;
        let waiter = Arc::new(Waiter::new(lock));
        let queued = {
            let mut state = shared.state.lock();
            if state.is_stopping() {
                return Err(Error::ShutDown);
            }
            state.join(channel, Arc::clone(&waiter))
        };
        if queued {
            shared.flush();
        }
        let mut state = shared.state.lock();
        while state.is_connected()
            && !state.is_stopping()
            && !state.is_confirmed(channel)
            && state.refusal(channel).is_none()
        {
            if shared
                .changed
                .wait_until(&mut state, give_up_at)
                .timed_out()
            {
                break;
            }
        }
        let refused = state.refusal(channel).map(Error::from_reply);
        drop(state);
        let subscription = Subscription {
            shared: Arc::clone(shared),
            channel: channel.to_owned(),
            waiter,
        };
        match refused {
            // Dropping the subscription leaves the channel.
            Some(err) => Err(err.for_user(shared.user.as_deref())),
            None => Ok(subscription),
        }
    }

    /// How many times the listener connected again after its first connection.
    pub(crate) fn reconnects(&self) -> u64 {
        self.shared.state.lock().reconnects()
    }

    /// How many channels the hub is subscribed to, or busy subscribing or unsubscribing.
    pub(crate) fn channel_count(&self) -> usize {
        self.shared.state.lock().channel_count()
    }

    /// Ends the subscribed connection, so the listener connects again (to where the master
    /// is now) and subscribes anew; waiters poll meanwhile.
    pub(crate) fn reconnect(&self) {
        self.shared.state.lock().drop_connection();
    }

    /// Stops and joins the listener thread; waiters fall back to their PTTL hints.
    pub(crate) fn stop(&self) {
        self.shared.state.lock().stop();
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.lock().take() {
            if thread.join().is_err() {
                log::error!("the pub/sub listener thread panicked");
            }
        }
    }
}
