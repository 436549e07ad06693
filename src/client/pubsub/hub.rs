//! One hub: a listener thread and the one subscribed connection it keeps to one server
//! (a single server, the master Sentinel names, or one master of a cluster), and the waiters'
//! memberships in its channels.
//!
//! A hub is spawned with its endpoint and the [`HubSettings`] every hub of a manager shares
//! (the mode, the notice channel and its handler, the timeouts). Waiters join a channel with
//! [`Shared::join`], which returns once Redis confirmed the subscription (or refused it, or
//! the connection is down, or the response timeout passed), and leave it by dropping their
//! [`Member`]. Stopping a hub ends its connection and its thread; joining the thread waits at
//! most for the connection attempt under way.
//!
//! Touches the hub's bookkeeping ([`State`]) under its lock, the outbox, and the endpoint
//! through the listener; knows nothing of clusters beyond two hooks: one it calls when its
//! node cannot be reached, one when the last channel leaves a hub marked as leaving (its node
//! left the cluster's map). Its lock and condition variable, and the waiters' wake
//! channels, are [`client::sync`](crate::client::sync)'s (`shuttle`'s in a schedule search).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::channels::{Interest, Mode, State, Waiter};
use super::outbox;
use super::transport::connection::Endpoint;
use crate::client::sync::{Condvar, Mutex, Receiver};
use crate::error::{Error, Permission, Result};

/// Handles one message of the notice channel; shared by every hub of a cluster, each of
/// which hears every notice (handling one twice is harmless).
pub(super) type SharedNoticeHandler = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// Called by a hub's listener when its node could not be reached, or the connection to it
/// was lost (outside every lock).
pub(super) type TroubleHook = Box<dyn Fn() + Send + Sync>;

/// Called when the last channel leaves a hub marked as [leaving](Shared::set_leaving) (outside
/// every lock).
pub(super) type UnusedHook = Box<dyn Fn() + Send + Sync>;

/// What every hub of one manager is made with.
#[derive(Clone)]
pub(super) struct HubSettings {
    pub(super) mode: Mode,
    pub(super) notice_channel: String,
    pub(super) notice_handler: SharedNoticeHandler,
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
}

/// What the listener thread and the waiting threads share.
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    /// Signalled when a subscription is confirmed, an attempt to connect ends, the
    /// connection comes or goes, or the hub stops.
    pub(super) changed: Condvar,
    pub(super) endpoint: Endpoint,
    /// The user the connection logs in as, for errors; `None` for Redis's default user.
    user: Option<String>,
    pub(super) notice_channel: String,
    pub(super) notice_handler: SharedNoticeHandler,
    /// Cluster mode: tells the cluster's hubs that the node could not be reached.
    pub(super) on_trouble: Option<TroubleHook>,
    /// Cluster mode: the node is no master anymore, and channels were left on the hub when
    /// the cluster's hubs last matched their hubs with the map: the last to leave calls
    /// `on_unused`, for the cluster's hubs to stop the hub.
    leaving: AtomicBool,
    on_unused: Option<UnusedHook>,
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
}

/// A hub's shared part and its listener thread.
pub(super) struct Hub {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Hub {
    /// Starts the listener thread, named `thread_name`; returns at once, with the first
    /// connection under way.
    pub(super) fn spawn(
        endpoint: Endpoint,
        user: Option<String>,
        settings: &HubSettings,
        on_trouble: Option<TroubleHook>,
        on_unused: Option<UnusedHook>,
        thread_name: String,
    ) -> Result<Self> {
        let shared = Arc::new(Shared::new(endpoint, user, settings, on_trouble, on_unused));
        let thread = std::thread::Builder::new()
            .name(thread_name)
            .spawn({
                let shared = Arc::clone(&shared);
                move || shared.run()
            })
            .map_err(Error::ThreadSpawn)?;
        Ok(Hub {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Tells the listener to stop, without waiting for it.
    pub(super) fn signal_stop(&self) {
        self.shared.state.lock().stop();
        self.shared.changed.notify_all();
    }

    /// Whether the listener thread has ended (or was joined).
    pub(super) fn is_finished(&self) -> bool {
        self.thread
            .lock()
            .as_ref()
            .is_none_or(JoinHandle::is_finished)
    }

    /// Stops and joins the listener thread; waiters fall back to their PTTL hints.
    pub(super) fn stop(&self) {
        self.signal_stop();
        self.join_thread();
    }

    /// Joins the listener thread of a hub told to stop (once).
    pub(super) fn join_thread(&self) {
        let thread = self.thread.lock().take();
        if let Some(thread) = thread {
            if thread.join().is_err() {
                log::error!("the pub/sub listener thread panicked");
            }
        }
    }
}

impl Shared {
    /// The shared part of a hub not connected yet, with no channel.
    pub(super) fn new(
        endpoint: Endpoint,
        user: Option<String>,
        settings: &HubSettings,
        on_trouble: Option<TroubleHook>,
        on_unused: Option<UnusedHook>,
    ) -> Self {
        Shared {
            state: Mutex::new(State::new(settings.mode)),
            changed: Condvar::new(),
            endpoint,
            user,
            notice_channel: settings.notice_channel.clone(),
            notice_handler: Arc::clone(&settings.notice_handler),
            on_trouble,
            leaving: AtomicBool::new(false),
            on_unused,
            connect_timeout: settings.connect_timeout,
            response_timeout: settings.response_timeout,
        }
    }

    /// Waits until `ready_by` for the first connection to subscribe to the notice channel (or
    /// for Redis to refuse the login), so the first waiters find a live subscription and no
    /// notice is missed from the start; then answers why no waiter could use the hub, if
    /// Redis said so.
    pub(super) fn await_first_connection(&self, ready_by: Instant) -> Option<Error> {
        let mut state = self.state.lock();
        while !state.notices_answered()
            && state.login_refusal().is_none()
            && !self.changed.wait_until(&mut state, ready_by).timed_out()
        {}
        self.unusable(&state)
    }

    /// Waits until `deadline` for the first attempt to connect to end, made or failed (a hub
    /// spawned for a waiter: it subscribes at once on a connection that came, and polls
    /// without one).
    pub(super) fn await_first_attempt(&self, deadline: Instant) {
        let mut state = self.state.lock();
        while !state.has_attempted()
            && !state.is_stopping()
            && !self.changed.wait_until(&mut state, deadline).timed_out()
        {}
    }

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
    pub(super) fn flush(&self) {
        outbox::flush(
            &self.state,
            |state| &mut state.outbox,
            self.response_timeout,
        );
    }

    /// Joins the waiters on `channel` with `interest` (see [`Interest`]); returns
    /// once Redis confirmed the subscription, or after the response timeout, or at once while
    /// there is no connection (check [`Member::is_live`]). Fails with Redis's refusal once
    /// Redis refused it, and with [`Error::ShutDown`] once the hub stops.
    pub(super) fn join(self: &Arc<Self>, channel: &str, interest: &Interest) -> Result<Member> {
        let give_up_at = Instant::now() + self.response_timeout;
        let waiter = Arc::new(Waiter::new(interest));
        let queued = {
            let mut state = self.state.lock();
            if state.is_stopping() {
                return Err(Error::ShutDown);
            }
            state.join(channel, Arc::clone(&waiter))
        };
        if queued {
            self.flush();
        }
        let mut state = self.state.lock();
        while state.is_connected()
            && !state.is_stopping()
            && !state.is_confirmed(channel)
            && state.refusal(channel).is_none()
            && !state.is_dropped(channel)
        {
            if self.changed.wait_until(&mut state, give_up_at).timed_out() {
                break;
            }
        }
        let refused = state.refusal(channel).map(Error::from_reply);
        drop(state);
        let member = Member {
            hub: Some(Arc::clone(self)),
            channel: channel.to_owned(),
            waiter,
            local: false,
        };
        match refused {
            // Dropping the member leaves the channel.
            Some(err) => Err(err.for_user(self.user.as_deref())),
            None => Ok(member),
        }
    }

    /// Stops the hub if no channel has waiters or commands due (no waiter is left to move
    /// away); answers whether it did. Nothing joins a stopped hub: a waiter that tries gets
    /// [`Error::ShutDown`].
    pub(super) fn retire_if_unused(&self) -> bool {
        let mut state = self.state.lock();
        if state.channel_count() > 0 {
            return false;
        }
        state.stop();
        drop(state);
        self.changed.notify_all();
        true
    }

    /// Marks the hub as one whose node is no master anymore (or not): see `leaving`. Set
    /// before [`retire_if_unused`](Self::retire_if_unused) is asked, so a channel that
    /// leaves after that finds it set.
    pub(super) fn set_leaving(&self, leaving: bool) {
        self.leaving.store(leaving, Ordering::SeqCst);
    }

    /// No channel is left on the hub: tells the cluster's hubs if the hub is leaving. Called
    /// outside every lock.
    pub(super) fn no_channel_left(&self) {
        if self.leaving.load(Ordering::SeqCst) {
            if let Some(on_unused) = &self.on_unused {
                on_unused();
            }
        }
    }

    pub(super) fn reconnects(&self) -> u64 {
        self.state.lock().reconnects()
    }

    pub(super) fn channel_count(&self) -> usize {
        self.state.lock().channel_count()
    }

    /// Ends the subscribed connection, so the listener connects again and subscribes anew.
    pub(super) fn reconnect(&self) {
        self.state.lock().drop_connection();
    }
}

/// One waiting thread's place among the waiters of one channel of one hub; leaving is
/// dropping it. A member of no hub (cluster mode, while no node serves the channel's slot)
/// is never live and woken only by its own [`pass_wake_on`](Member::pass_wake_on); a
/// local member is a member of no hub that is always live: only this process wakes it.
pub(super) struct Member {
    hub: Option<Arc<Shared>>,
    channel: String,
    waiter: Arc<Waiter>,
    local: bool,
}

impl Member {
    /// A member of no hub.
    pub(super) fn detached(channel: &str, interest: &Interest) -> Self {
        Member {
            hub: None,
            channel: channel.to_owned(),
            waiter: Arc::new(Waiter::new(interest)),
            local: false,
        }
    }

    /// A member of no hub that only this process wakes, through [`waker`](Member::waker).
    pub(super) fn local() -> Self {
        let mut member = Member::detached("", &Interest::default());
        member.local = true;
        member
    }

    /// What wakes this member from another thread.
    pub(super) fn waker(&self) -> Arc<Waiter> {
        Arc::clone(&self.waiter)
    }

    pub(super) fn channel(&self) -> &str {
        &self.channel
    }

    /// Whether Redis has confirmed the subscription and the connection still stands.
    pub(super) fn is_live(&self) -> bool {
        self.local
            || self.hub.as_ref().is_some_and(|hub| {
                let state = hub.state.lock();
                state.is_connected() && state.is_confirmed(&self.channel)
            })
    }

    /// Whether the hub is connected, and whether Redis dropped the channel (see
    /// [`State::is_dropped`]); a member of no hub is neither.
    pub(super) fn status(&self) -> (bool, bool) {
        match &self.hub {
            Some(hub) => {
                let state = hub.state.lock();
                (state.is_connected(), state.is_dropped(&self.channel))
            }
            None => (false, false),
        }
    }

    /// Sleeps until this waiter is woken or `timeout` passes; answers whether it was woken.
    pub(super) fn wait(&self, timeout: Duration) -> bool {
        self.waiter.woken.recv_timeout(timeout).is_ok()
    }

    pub(super) fn woken(&self) -> &Receiver<()> {
        &self.waiter.woken
    }

    /// Gives back a wake this waiter took and will not use.
    pub(super) fn pass_wake_on(&self) {
        self.waiter.wake();
    }

    /// Takes the wake pending for this waiter, if any.
    pub(super) fn take_wake(&self) -> bool {
        self.waiter.woken.try_recv().is_ok()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let Some(hub) = &self.hub else {
            return;
        };
        let (queued, unused) = {
            let mut state = hub.state.lock();
            let queued = state.leave(&self.channel, &self.waiter);
            (queued, state.channel_count() == 0)
        };
        if queued {
            hub.flush();
        }
        if unused {
            hub.no_channel_left();
        }
    }
}
