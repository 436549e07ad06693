//! Channels: `crossbeam-channel`'s, or inside a search a queue under `shuttle`'s lock whose
//! ends wait on `shuttle`'s condition variable (one sender and one receiver: the client
//! clones neither; a sender's drop disconnects the receiver, and the receiver's the sender).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use crossbeam_channel::RecvTimeoutError;
use crossbeam_channel::{RecvError, SendError, TryRecvError, TrySendError};

use super::in_search;

pub(crate) enum Sender<T> {
    Plain(crossbeam_channel::Sender<T>),
    Searched(Arc<SearchedChannel<T>>),
}

pub(crate) enum Receiver<T> {
    Plain(crossbeam_channel::Receiver<T>),
    Searched(Arc<SearchedChannel<T>>),
}

/// A channel made inside a search.
pub(crate) struct SearchedChannel<T> {
    queue: shuttle::sync::Mutex<Queue<T>>,
    /// Wakes the other end: a value came or went, or an end was dropped.
    changed: shuttle::sync::Condvar,
}

struct Queue<T> {
    values: VecDeque<T>,
    /// How many values it holds at most (`None`: no bound).
    bound: Option<usize>,
    /// Neither end was dropped.
    connected: bool,
}

/// A channel without a bound.
pub(crate) fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    match in_search() {
        false => plain(crossbeam_channel::unbounded()),
        true => searched(None),
    }
}

/// A channel that holds `bound` values at most (one at least: a searched channel has no
/// rendezvous).
pub(crate) fn bounded<T>(bound: usize) -> (Sender<T>, Receiver<T>) {
    match in_search() {
        false => plain(crossbeam_channel::bounded(bound)),
        true => {
            assert!(bound > 0, "a searched channel holds a value at least");
            searched(Some(bound))
        }
    }
}

fn plain<T>(
    (sender, receiver): (crossbeam_channel::Sender<T>, crossbeam_channel::Receiver<T>),
) -> (Sender<T>, Receiver<T>) {
    (Sender::Plain(sender), Receiver::Plain(receiver))
}

fn searched<T>(bound: Option<usize>) -> (Sender<T>, Receiver<T>) {
    let channel = Arc::new(SearchedChannel {
        queue: shuttle::sync::Mutex::new(Queue {
            values: VecDeque::new(),
            bound,
            connected: true,
        }),
        changed: shuttle::sync::Condvar::new(),
    });
    (
        Sender::Searched(Arc::clone(&channel)),
        Receiver::Searched(channel),
    )
}

impl<T> SearchedChannel<T> {
    fn queue(&self) -> shuttle::sync::MutexGuard<'_, Queue<T>> {
        self.queue
            .lock()
            .expect("a searched channel's user panicked")
    }

    fn wait<'a>(
        &self,
        queue: shuttle::sync::MutexGuard<'a, Queue<T>>,
    ) -> shuttle::sync::MutexGuard<'a, Queue<T>> {
        self.changed
            .wait(queue)
            .expect("a searched channel's user panicked")
    }

    /// Queues `value`, waiting for room if `wait`s (else failing when full); fails once the
    /// receiver is gone.
    fn push(&self, value: T, wait: bool) -> Result<(), TrySendError<T>> {
        let mut queue = self.queue();
        loop {
            if !queue.connected {
                return Err(TrySendError::Disconnected(value));
            }
            if queue.bound.is_none_or(|bound| queue.values.len() < bound) {
                break;
            }
            if !wait {
                return Err(TrySendError::Full(value));
            }
            queue = self.wait(queue);
        }
        queue.values.push_back(value);
        drop(queue);
        self.changed.notify_all();
        Ok(())
    }

    /// Takes the first value, waiting for one if `wait`s; fails when there is none and the
    /// sender is gone.
    fn pop(&self, wait: bool) -> Result<T, TryRecvError> {
        let mut queue = self.queue();
        loop {
            if let Some(value) = queue.values.pop_front() {
                drop(queue);
                self.changed.notify_all();
                return Ok(value);
            }
            if !queue.connected {
                return Err(TryRecvError::Disconnected);
            }
            if !wait {
                return Err(TryRecvError::Empty);
            }
            queue = self.wait(queue);
        }
    }

    /// An end was dropped.
    fn disconnect(&self) {
        self.queue().connected = false;
        self.changed.notify_all();
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if let Sender::Searched(channel) = self {
            channel.disconnect();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        if let Receiver::Searched(channel) = self {
            channel.disconnect();
        }
    }
}

impl<T> Sender<T> {
    pub(crate) fn send(&self, value: T) -> Result<(), SendError<T>> {
        match self {
            Sender::Plain(sender) => sender.send(value),
            Sender::Searched(channel) => channel
                .push(value, true)
                .map_err(|err| SendError(err.into_inner())),
        }
    }

    pub(crate) fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        match self {
            Sender::Plain(sender) => sender.try_send(value),
            Sender::Searched(channel) => channel.push(value, false),
        }
    }
}

impl<T> Receiver<T> {
    pub(crate) fn recv(&self) -> Result<T, RecvError> {
        match self {
            Receiver::Plain(receiver) => receiver.recv(),
            Receiver::Searched(channel) => channel.pop(true).map_err(|_| RecvError),
        }
    }

    /// Waits for a value for `timeout` at most (a searched receiver waits for the value, or
    /// the disconnection).
    pub(crate) fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        match self {
            Receiver::Plain(receiver) => receiver.recv_timeout(timeout),
            Receiver::Searched(channel) => channel
                .pop(true)
                .map_err(|_| RecvTimeoutError::Disconnected),
        }
    }

    pub(crate) fn try_recv(&self) -> Result<T, TryRecvError> {
        match self {
            Receiver::Plain(receiver) => receiver.try_recv(),
            Receiver::Searched(channel) => channel.pop(false),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Receiver::Plain(receiver) => receiver.is_empty(),
            Receiver::Searched(channel) => channel.queue().values.is_empty(),
        }
    }

    /// The values waiting now.
    pub(crate) fn try_iter(&self) -> impl Iterator<Item = T> + '_ {
        std::iter::from_fn(move || self.try_recv().ok())
    }
}

/// Blocks until any of `receivers` has a value (or is disconnected), `also` turns ready, or
/// `timeout` passes. Not searched: a wait on several channels is not made inside a search.
pub(crate) fn wait_ready(
    receivers: &[&Receiver<()>],
    also: Option<&crossbeam_channel::Receiver<()>>,
    timeout: Duration,
) {
    let plain: Vec<_> = receivers
        .iter()
        .map(|receiver| match receiver {
            Receiver::Plain(receiver) => receiver,
            Receiver::Searched(_) => panic!("a wait on several channels is not searched"),
        })
        .collect();
    super::super::select_ready(&plain, also, timeout);
}
