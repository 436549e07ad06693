//! The hub's bookkeeping, kept under its one lock: which channels have waiters, which
//! subscriptions Redis has confirmed, and who to wake for a message.
//!
//! Wake rules: a release message (`0`) wakes one waiter of each lock name on the channel
//! (several lock names can share one channel, and a message does not say which was freed); a
//! read-lock release (`1`) wakes all; a waiter that listens for every message (a latch, a
//! semaphore) is woken by any; a waiter that leaves with an unused wake passes it on
//! to a waiter of the same lock; a new connection wakes everyone, as a release may have gone
//! by unseen.
//!
//! Refusals: Redis answers a refused command (an ACL without `SUBSCRIBE`, or without the
//! channel) with one error reply for the whole command, which names no channel. So each
//! channel is subscribed by a command of its own, and the hub keeps the commands whose
//! answers are due, oldest first: Redis answers in order, and the oldest is the one refused.
//! A refused subscription is remembered on its channel until it is asked for again, for the
//! waiters that wait for its answer to see.
//!
//! Modes: a hub subscribes its release channels with `SUBSCRIBE` (a single server, Sentinel,
//! a Redis 6 cluster) or, in [`Mode::Sharded`], with `SSUBSCRIBE` on the node that serves the
//! channel's slot (a Redis 7 cluster, whose releases are `SPUBLISH`ed). The notice channel is
//! always a plain `SUBSCRIBE`: notices are published with `PUBLISH`, which a cluster hands to
//! every node.
//!
//! What a cluster node does on its own: when a slot leaves it (a migration, a failover that
//! demotes it), it ends every subscription to the shard channels of that slot with a
//! `sunsubscribe` frame that answers no command. It is told from the answer to our own
//! `SUNSUBSCRIBE` by the commands due: Redis answers in order, so our answer comes when that
//! `SUNSUBSCRIBE` is the oldest command due; one that comes for a channel whose last command
//! (`SSUBSCRIBE`) was confirmed with nothing due is the node's own. It answers no command, so
//! no command's answer is taken for it; the channel is marked [dropped](State::is_dropped)
//! and its waiters are woken, to try again and to move their subscription to where the slot
//! went. A `MOVED` (or `ASK`, `CLUSTERDOWN`, `TRYAGAIN`) answer to `SSUBSCRIBE` drops the
//! channel the same way, instead of failing its waiters: the slot is served elsewhere, or not
//! now.
//!
//! One race is left, as frames cannot tell it: a slot that leaves the node while our
//! `SUNSUBSCRIBE` of one of its channels is on its way. The node's own frame is taken for the
//! answer, and the node's error answer to our command (it serves the slot no more) for the
//! next command's. The next confirmation puts the commands due right again (see
//! [`State::answer_arrived`]), and a channel wrongly taken as moved is asked for again by its
//! waiters, which move it.
//!
//! Everything here runs under the hub's lock and does no I/O: commands are only queued in
//! the [`Outbox`], in the order decided, for a writer to send after the lock is released.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::client::sync::{Receiver, Sender};

use super::outbox::Outbox;
use super::transport::connection::Stream;

/// How a hub subscribes its release channels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Mode {
    /// `SUBSCRIBE`/`UNSUBSCRIBE`, messages `message`.
    #[default]
    Plain,
    /// `SSUBSCRIBE`/`SUNSUBSCRIBE`, messages `smessage` (shard channels of a Redis 7
    /// cluster).
    Sharded,
}

impl Mode {
    fn subscribe_command(self) -> &'static str {
        match self {
            Mode::Plain => "SUBSCRIBE",
            Mode::Sharded => "SSUBSCRIBE",
        }
    }

    fn unsubscribe_command(self) -> &'static str {
        match self {
            Mode::Plain => "UNSUBSCRIBE",
            Mode::Sharded => "SUNSUBSCRIBE",
        }
    }

    /// The kind of frame of a message on a release channel.
    pub(super) fn message_kind(self) -> &'static [u8] {
        match self {
            Mode::Plain => b"message",
            Mode::Sharded => b"smessage",
        }
    }

    /// The kind of frame that confirms a subscription to a release channel.
    pub(super) fn subscribed_kind(self) -> &'static [u8] {
        match self {
            Mode::Plain => b"subscribe",
            Mode::Sharded => b"ssubscribe",
        }
    }

    /// The kind of frame that ends a subscription to a release channel.
    pub(super) fn unsubscribed_kind(self) -> &'static [u8] {
        match self {
            Mode::Plain => b"unsubscribe",
            Mode::Sharded => b"sunsubscribe",
        }
    }
}

/// Whether an error answer to `SSUBSCRIBE` says the channel's slot is served elsewhere or not
/// now, rather than refusing the subscription.
pub(super) fn is_redirection(reply: &str) -> bool {
    ["MOVED ", "ASK ", "CLUSTERDOWN", "TRYAGAIN"]
        .iter()
        .any(|prefix| reply.starts_with(prefix))
}

#[derive(Default)]
pub(super) struct State {
    mode: Mode,
    channels: HashMap<String, Channel>,
    /// The commands for the subscribed connection, and its writing handle while there is
    /// one: the hub is connected exactly while the outbox is open.
    pub(super) outbox: Outbox,
    /// The commands queued for this connection whose answers have not arrived, oldest
    /// first.
    awaiting: VecDeque<Sent>,
    /// Redis has answered (confirmed or refused) the subscription to the notice channel on
    /// this connection.
    notices_answered: bool,
    /// Redis's error reply to the subscription to the notice channel on this connection.
    notices_refusal: Option<String>,
    /// Redis's error reply to the `AUTH` of the last attempt to connect, until a connection
    /// is made.
    login_refusal: Option<String>,
    stopping: bool,
    /// Connections made so far.
    connections: u64,
    /// The first attempt to connect has ended, made or failed.
    attempted: bool,
}

/// A command queued for the subscribed connection whose answer is due.
pub(super) enum Sent {
    /// `SUBSCRIBE` of the notice channel.
    Notices,
    /// `SUBSCRIBE` (or `SSUBSCRIBE`) of a release channel.
    Subscribe(String),
    /// `UNSUBSCRIBE` (or `SUNSUBSCRIBE`) of a release channel.
    Unsubscribe(String),
    Ping,
}

/// The subscription to one channel.
///
/// `subscribed` tells which command was queued last for the channel and `unconfirmed` how
/// many of its answers are still to come. Commands for one connection are written in the
/// order they were queued (see [`Outbox`]) and Redis answers them in that order, so when
/// `unconfirmed` comes down to 0 Redis is in the state the last command asked for: SUBSCRIBE
/// and UNSUBSCRIBE for the same channel may race between threads without the count or the
/// `confirmed` flag going wrong.
#[derive(Default)]
struct Channel {
    /// In the order they are woken: a woken waiter moves to the back.
    waiters: VecDeque<Arc<Waiter>>,
    /// `SUBSCRIBE`/`UNSUBSCRIBE` commands queued whose answers have not arrived yet.
    unconfirmed: u32,
    /// The last command queued for this channel was `SUBSCRIBE`.
    subscribed: bool,
    /// ... and Redis has confirmed it.
    confirmed: bool,
    /// Redis's error reply to the last `SUBSCRIBE` of the channel, until it is sent again.
    refusal: Option<String>,
    /// Redis ended the subscription on its own, or sent it to another node (see the module
    /// doc), since it was last asked for.
    dropped: bool,
}

/// What a waiter listens for on its channel: the lock name it waits for (`None`: every
/// message wakes it), and where a message other than a wake is kept for it to read.
#[derive(Clone, Default)]
pub(crate) struct Interest {
    pub(super) lock: Option<String>,
    pub(super) letters: Option<Letterbox>,
}

impl Interest {
    /// A waiter for the lock `lock` (`None`: for every message).
    pub(crate) fn lock(lock: Option<&str>) -> Self {
        Interest {
            lock: lock.map(str::to_owned),
            letters: None,
        }
    }

    /// The same, keeping the messages other than wakes in `letters`.
    pub(crate) fn with_letters(self, letters: Letterbox) -> Self {
        Interest {
            letters: Some(letters),
            ..self
        }
    }
}

/// Where the last message other than a wake (`0`, `1`) heard on a waiter's channel is kept,
/// for the waiter to read (a fair lock's grant). It stays the waiter's while its subscription
/// moves between nodes.
#[derive(Clone, Default)]
pub(crate) struct Letterbox(Arc<parking_lot::Mutex<Option<Box<[u8]>>>>);

impl Letterbox {
    /// Takes the message kept, if any.
    pub(crate) fn take(&self) -> Option<Box<[u8]>> {
        self.0.lock().take()
    }

    fn put(&self, payload: &[u8]) {
        *self.0.lock() = Some(payload.into());
    }
}

/// One waiting thread's place on a channel.
pub(super) struct Waiter {
    /// The lock name it waits for; `None` when every message on the channel wakes it.
    lock: Option<String>,
    letters: Option<Letterbox>,
    wake: Sender<()>,
    pub(super) woken: Receiver<()>,
}

impl Waiter {
    pub(super) fn new(interest: &Interest) -> Self {
        let (wake, woken) = crate::client::sync::bounded(1);
        Waiter {
            lock: interest.lock.clone(),
            letters: interest.letters.clone(),
            wake,
            woken,
        }
    }

    /// Wakes it unless a wake is pending already.
    pub(super) fn wake(&self) {
        let _ = self.wake.try_send(());
    }

    fn has_pending_wake(&self) -> bool {
        !self.woken.is_empty()
    }
}

impl State {
    pub(super) fn new(mode: Mode) -> Self {
        State {
            mode,
            ..State::default()
        }
    }

    pub(super) fn mode(&self) -> Mode {
        self.mode
    }

    pub(super) fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// Marks the hub as stopping and ends the connection, so the listener's read returns.
    pub(super) fn stop(&mut self) {
        self.stopping = true;
        self.outbox.shut_down();
    }

    /// Ends the connection (the listener's read returns and it connects again).
    pub(super) fn drop_connection(&mut self) {
        self.outbox.shut_down();
    }

    pub(super) fn is_connected(&self) -> bool {
        self.outbox.is_open()
    }

    pub(super) fn notices_answered(&self) -> bool {
        self.notices_answered
    }

    /// Redis's error reply to the subscription to the notice channel on this connection.
    pub(super) fn notices_refusal(&self) -> Option<&str> {
        self.notices_refusal.as_deref()
    }

    /// Redis's error reply to the login of the last attempt to connect, until a connection
    /// is made.
    pub(super) fn login_refusal(&self) -> Option<&str> {
        self.login_refusal.as_deref()
    }

    /// Redis refused the login of an attempt to connect; answers whether the last attempt
    /// was not refused, so a refusal repeated by every retry is told once.
    pub(super) fn login_refused(&mut self, reply: &str) -> bool {
        self.login_refusal.replace(reply.to_owned()).is_none()
    }

    /// An attempt to connect failed.
    pub(super) fn attempt_failed(&mut self) {
        self.attempted = true;
    }

    /// Whether the first attempt to connect has ended, made or failed.
    pub(super) fn has_attempted(&self) -> bool {
        self.attempted
    }

    /// How many times a connection was made after the first.
    pub(super) fn reconnects(&self) -> u64 {
        self.connections.saturating_sub(1)
    }

    pub(super) fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Whether Redis has confirmed the subscription to `channel` on the current connection.
    pub(super) fn is_confirmed(&self, channel: &str) -> bool {
        self.channels
            .get(channel)
            .is_some_and(|channel| channel.confirmed)
    }

    /// Redis's error reply to the last `SUBSCRIBE` of `channel`, unless it was sent again.
    pub(super) fn refusal(&self, channel: &str) -> Option<&str> {
        self.channels.get(channel)?.refusal.as_deref()
    }

    /// Whether Redis ended the subscription to `channel` on its own, or answered that the
    /// channel's slot is served elsewhere, since it was last asked for.
    pub(super) fn is_dropped(&self, channel: &str) -> bool {
        self.channels
            .get(channel)
            .is_some_and(|channel| channel.dropped)
    }

    /// Adds a waiter to `channel`, queuing `SUBSCRIBE` if the channel is not subscribed (or
    /// its subscription was refused); answers whether it queued a command.
    pub(super) fn join(&mut self, channel: &str, waiter: Arc<Waiter>) -> bool {
        let entry = self.channels.entry(channel.to_owned()).or_default();
        entry.waiters.push_back(waiter);
        if !entry.subscribed && self.outbox.queue(self.mode.subscribe_command(), channel) {
            entry.subscribed = true;
            entry.unconfirmed += 1;
            entry.refusal = None;
            entry.dropped = false;
            self.awaiting.push_back(Sent::Subscribe(channel.to_owned()));
            return true;
        }
        false
    }

    /// Removes a waiter from `channel`, passing on a wake it did not use; the last waiter to
    /// leave queues `UNSUBSCRIBE`. Answers whether it queued a command.
    pub(super) fn leave(&mut self, channel: &str, waiter: &Arc<Waiter>) -> bool {
        let Some(entry) = self.channels.get_mut(channel) else {
            return false;
        };
        entry.waiters.retain(|other| !Arc::ptr_eq(other, waiter));
        if waiter.woken.try_recv().is_ok() {
            if let Some(lock) = &waiter.lock {
                // It was woken for a release it will not use: pass the wake on to a waiter
                // of the same lock. (Every waiter of the others heard the message.)
                wake_one_of(entry, lock);
            }
        }
        if !entry.waiters.is_empty() {
            return false;
        }
        if entry.subscribed && self.outbox.queue(self.mode.unsubscribe_command(), channel) {
            entry.subscribed = false;
            entry.confirmed = false;
            entry.unconfirmed += 1;
            self.awaiting
                .push_back(Sent::Unsubscribe(channel.to_owned()));
            return true;
        }
        if entry.unconfirmed == 0 || !self.outbox.is_open() {
            // Nothing more will come for it: answers still due would find it gone and be
            // ignored.
            self.channels.remove(channel);
        }
        false
    }

    /// A new connection: queues `SUBSCRIBE` for the notice channel and again (in the hub's
    /// mode) for every channel with waiters, one command each (anything queued for the
    /// previous connection is dropped with it), and wakes every waiter.
    pub(super) fn connected(&mut self, writer: Stream, notice_channel: &str) {
        self.connections += 1;
        if self.connections > 1 {
            crate::client::telemetry::pubsub_reconnected();
        }
        self.attempted = true;
        let mut names = Vec::new();
        self.channels.retain(|name, channel| {
            channel.confirmed = false;
            channel.refusal = None;
            channel.dropped = false;
            channel.subscribed = !channel.waiters.is_empty();
            channel.unconfirmed = u32::from(channel.subscribed);
            if channel.subscribed {
                names.push(name.clone());
            }
            channel.subscribed
        });
        self.notices_answered = false;
        self.notices_refusal = None;
        self.login_refusal = None;
        self.outbox.open(writer);
        self.awaiting.clear();
        // Each on its own: an ACL that refuses one channel must not refuse the others too.
        self.outbox.queue("SUBSCRIBE", notice_channel);
        self.awaiting.push_back(Sent::Notices);
        for name in names {
            self.outbox.queue(self.mode.subscribe_command(), &name);
            self.awaiting.push_back(Sent::Subscribe(name));
        }
        self.wake_everyone();
    }

    /// Queues a `PING`; answers `false` (and queues nothing) without a connection.
    pub(super) fn queue_ping(&mut self) -> bool {
        let queued = self.outbox.queue("PING", &[] as &[&str]);
        if queued {
            self.awaiting.push_back(Sent::Ping);
        }
        queued
    }

    /// The connection is gone: forgets its subscriptions and wakes every waiter, so they
    /// retry now and poll until the next connection.
    pub(super) fn disconnected(&mut self) {
        self.outbox.close();
        self.awaiting.clear();
        self.notices_answered = false;
        self.channels.retain(|_, channel| {
            channel.subscribed = false;
            channel.confirmed = false;
            channel.refusal = None;
            channel.dropped = false;
            channel.unconfirmed = 0;
            !channel.waiters.is_empty()
        });
        self.wake_everyone();
    }

    /// Redis confirmed the subscription to the notice channel.
    pub(super) fn notices_now_answered(&mut self) {
        self.notices_answered = true;
    }

    /// An answer that is no error arrived (a confirmation, a pong) for a command `answers`
    /// picks: the oldest such command awaiting its answer has it, and the commands before it,
    /// whose answers were taken for others', are due no more. One that answers no command
    /// due changes nothing.
    ///
    /// Redis answers in order, so while every answer is taken for the right command the
    /// oldest one due is the one answered. The search only matters after an error answer
    /// was taken for the wrong command (error answers name no channel, see the module doc):
    /// the next confirmation puts the queue right again.
    pub(super) fn answer_arrived(&mut self, answers: impl Fn(&Sent) -> bool) {
        if let Some(position) = self.awaiting.iter().position(answers) {
            self.awaiting.drain(..=position);
        }
    }

    /// A frame that ends the subscription to `channel` (`unsubscribe`, `sunsubscribe`)
    /// arrived: the answer to our command when that is the oldest one due, else (shard
    /// channels only) the node's own. Answers whether waiters blocked on the channel may go
    /// on.
    pub(super) fn unsubscribed(&mut self, channel: &str) -> bool {
        let ours = matches!(
            self.awaiting.front(),
            Some(Sent::Unsubscribe(due)) if due == channel
        );
        if ours || self.mode == Mode::Plain {
            self.awaiting.pop_front();
            return self.subscription_answered(channel);
        }
        self.dropped_by_server(channel)
    }

    /// The node ended the subscription to `channel` with no command of ours due for it: the
    /// channel's slot left the node. Marks it dropped and wakes its waiters; answers whether
    /// it did. (With a command of ours due for the channel, its answer settles the channel.)
    fn dropped_by_server(&mut self, channel: &str) -> bool {
        let Some(entry) = self.channels.get_mut(channel) else {
            return false;
        };
        if !(entry.subscribed && entry.confirmed && entry.unconfirmed == 0) {
            return false;
        }
        entry.subscribed = false;
        entry.confirmed = false;
        entry.dropped = true;
        entry.waiters.iter().for_each(|waiter| waiter.wake());
        true
    }

    /// Redis answered the oldest command awaiting its answer with the error `reply`: records
    /// the refusal where waiters look for it, settles the command's counts as its answers
    /// would have, and answers which command it was (`None`: no command was awaiting one).
    pub(super) fn refused(&mut self, reply: &str) -> Option<Sent> {
        let sent = self.awaiting.pop_front()?;
        match &sent {
            Sent::Notices => {
                self.notices_answered = true;
                self.notices_refusal = Some(reply.to_owned());
            }
            Sent::Subscribe(channel) if self.mode == Mode::Sharded && is_redirection(reply) => {
                self.subscription_moved(channel);
            }
            Sent::Subscribe(channel) => self.subscription_refused(channel, reply),
            // Redis keeps the channel subscribed; its messages find no waiters and are
            // dropped. (A cluster node refuses `SUNSUBSCRIBE` for a slot it does not serve:
            // then it has ended the subscription already.)
            Sent::Unsubscribe(channel) => {
                self.subscription_answered(channel);
            }
            Sent::Ping => {}
        }
        Some(sent)
    }

    /// Counts one answer to a command for `channel`: its entry, if that was the answer to the
    /// last command sent for it (an earlier one is overtaken by what followed it).
    fn last_answer(&mut self, channel: &str) -> Option<&mut Channel> {
        let entry = self.channels.get_mut(channel)?;
        entry.unconfirmed = entry.unconfirmed.saturating_sub(1);
        (entry.unconfirmed == 0).then_some(entry)
    }

    /// Redis refused a `SUBSCRIBE` of `channel`: if it was the last command for the channel,
    /// the channel is not subscribed, and its refusal waits for its waiters to see it.
    fn subscription_refused(&mut self, channel: &str, reply: &str) {
        let Some(entry) = self.last_answer(channel) else {
            return;
        };
        if entry.subscribed {
            entry.subscribed = false;
            entry.refusal = Some(reply.to_owned());
        } else if entry.waiters.is_empty() {
            self.channels.remove(channel);
        }
    }

    /// The node answered an `SSUBSCRIBE` of `channel` that the channel's slot is served
    /// elsewhere, or not now: if it was the last command for the channel, the channel is
    /// dropped, and its waiters are woken to move their subscription.
    fn subscription_moved(&mut self, channel: &str) {
        let Some(entry) = self.last_answer(channel) else {
            return;
        };
        if entry.subscribed {
            entry.subscribed = false;
            entry.dropped = true;
            entry.waiters.iter().for_each(|waiter| waiter.wake());
        } else if entry.waiters.is_empty() {
            self.channels.remove(channel);
        }
    }

    /// Redis answered a `SUBSCRIBE` or `UNSUBSCRIBE` for `channel`; answers whether that
    /// confirmed a subscription waiters may be blocked on.
    pub(super) fn subscription_answered(&mut self, channel: &str) -> bool {
        let Some(entry) = self.last_answer(channel) else {
            return false;
        };
        if entry.subscribed {
            entry.confirmed = true;
            return true;
        }
        if entry.waiters.is_empty() {
            self.channels.remove(channel);
        }
        false
    }

    /// A message on a release channel: `1` (a read lock freed) wakes all its waiters,
    /// anything else one waiter per lock name and every waiter that listens for every
    /// message; a message other than `0` and `1` is kept in the letterbox of every waiter
    /// of the channel that has one, first.
    pub(super) fn released(&mut self, channel: &str, payload: &[u8]) {
        let Some(entry) = self.channels.get_mut(channel) else {
            return;
        };
        if payload != b"0" && payload != b"1" {
            let letters = entry
                .waiters
                .iter()
                .filter_map(|waiter| waiter.letters.as_ref());
            letters.for_each(|letters| letters.put(payload));
        }
        if payload == b"1" {
            entry.waiters.iter().for_each(|waiter| waiter.wake());
        } else {
            entry
                .waiters
                .iter()
                .filter(|waiter| waiter.lock.is_none())
                .for_each(|waiter| waiter.wake());
            wake_one_per_lock(entry);
        }
    }

    fn wake_everyone(&self) {
        for channel in self.channels.values() {
            channel.waiters.iter().for_each(|waiter| waiter.wake());
        }
    }
}

/// Wakes, for each lock name waited for on the channel, its first waiter that has no wake
/// pending, and moves the woken to the back.
fn wake_one_per_lock(channel: &mut Channel) {
    let mut locks: Vec<String> = Vec::new();
    for waiter in &channel.waiters {
        if let Some(lock) = &waiter.lock {
            if !locks.contains(lock) {
                locks.push(lock.clone());
            }
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
        .position(|waiter| waiter.lock.as_deref() == Some(lock) && !waiter.has_pending_wake());
    if let Some(waiter) = position.and_then(|position| channel.waiters.remove(position)) {
        waiter.wake();
        channel.waiters.push_back(waiter);
    }
}
