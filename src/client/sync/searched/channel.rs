//! Channels: `crossbeam-channel`'s, or inside a search a queue under `shuttle`'s lock whose
//! receiver waits on `shuttle`'s condition variable (one receiver; the last sender dropped
//! disconnects it).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use crossbeam_channel::RecvTimeoutError;
use crossbeam_channel::{RecvError, SendError, TryRecvError, TrySendError};

use super::in_search;

pub(crate) enum Sender<T> {
    Plain(crossbeam_channel::Sender<T>),
    Searched(Arc<Searched<T>>),
}

pub(crate) enum Receiver<T> {
    Plain(crossbeam_channel::Receiver<T>),
    Searched(Arc<Searched<T>>),
}

/// A searched channel.
pub(crate) struct Searched<T> {
    queue: shuttle::sync::Mutex<Queue<T>>,
    /// Wakes the receiver: a value came, or the last sender went.
    changed: shuttle::sync::Condvar,
}

struct Queue<T> {
    values: VecDeque<T>,
    /// How many values it holds at most (`None`: no bound).
    bound: Option<usize>,
    senders: usize,
}

/// A channel without a bound.
pub(crate) fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    match in_search() {
        false => plain(crossbeam_channel::unbounded()),
        true => searched(None),
    }
}

/// A channel that holds `bound` values at most.
pub(crate) fn bounded<T>(bound: usize) -> (Sender<T>, Receiver<T>) {
    match in_search() {
        false => plain(crossbeam_channel::bounded(bound)),
        true => searched(Some(bound)),
    }
}

fn plain<T>(
    (sender, receiver): (crossbeam_channel::Sender<T>, crossbeam_channel::Receiver<T>),
) -> (Sender<T>, Receiver<T>) {
    (Sender::Plain(sender), Receiver::Plain(receiver))
}

fn searched<T>(bound: Option<usize>) -> (Sender<T>, Receiver<T>) {
    let channel = Arc::new(Searched {
        queue: shuttle::sync::Mutex::new(Queue {
            values: VecDeque::new(),
            bound,
            senders: 1,
        }),
        changed: shuttle::sync::Condvar::new(),
    });
    (
        Sender::Searched(Arc::clone(&channel)),
        Receiver::Searched(channel),
    )
}

impl<T> Searched<T> {
    fn queue(&self) -> shuttle::sync::MutexGuard<'_, Queue<T>> {
        self.queue
            .lock()
            .expect("a searched channel's user panicked")
    }

    /// Queues `value`, unless the channel is full.
    fn push(&self, value: T) -> Result<(), T> {
        let mut queue = self.queue();
        if queue.bound.is_some_and(|bound| queue.values.len() >= bound) {
            return Err(value);
        }
        queue.values.push_back(value);
        drop(queue);
        self.changed.notify_all();
        Ok(())
    }

    fn try_pop(&self) -> Result<T, TryRecvError> {
        let mut queue = self.queue();
        match queue.values.pop_front() {
            Some(value) => Ok(value),
            None if queue.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Waits for a value; `None` once the channel is empty and disconnected.
    fn pop(&self) -> Option<T> {
        let mut queue = self.queue();
        loop {
            if let Some(value) = queue.values.pop_front() {
                return Some(value);
            }
            if queue.senders == 0 {
                return None;
            }
            queue = self
                .changed
                .wait(queue)
                .expect("a searched channel's user panicked");
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if let Sender::Searched(channel) = self {
            channel.queue().senders -= 1;
            channel.changed.notify_all();
        }
    }
}

impl<T> Sender<T> {
    pub(crate) fn send(&self, value: T) -> Result<(), SendError<T>> {
        match self {
            Sender::Plain(sender) => sender.send(value),
            Sender::Searched(channel) => channel.push(value).map_err(SendError),
        }
    }

    pub(crate) fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        match self {
            Sender::Plain(sender) => sender.try_send(value),
            Sender::Searched(channel) => channel.push(value).map_err(TrySendError::Full),
        }
    }
}

impl<T> Receiver<T> {
    pub(crate) fn recv(&self) -> Result<T, RecvError> {
        match self {
            Receiver::Plain(receiver) => receiver.recv(),
            Receiver::Searched(channel) => channel.pop().ok_or(RecvError),
        }
    }

    /// Waits for a value for `timeout` at most (a searched receiver waits for the value, or
    /// the disconnection).
    pub(crate) fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        match self {
            Receiver::Plain(receiver) => receiver.recv_timeout(timeout),
            Receiver::Searched(channel) => channel.pop().ok_or(RecvTimeoutError::Disconnected),
        }
    }

    pub(crate) fn try_recv(&self) -> Result<T, TryRecvError> {
        match self {
            Receiver::Plain(receiver) => receiver.try_recv(),
            Receiver::Searched(channel) => channel.try_pop(),
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
/// `timeout` passes. Inside a search, with no timeout: the thread yields until one does.
pub(crate) fn wait_ready(
    receivers: &[&Receiver<()>],
    also: Option<&crossbeam_channel::Receiver<()>>,
    timeout: Duration,
) {
    let plain: Option<Vec<_>> = receivers
        .iter()
        .map(|receiver| match receiver {
            Receiver::Plain(receiver) => Some(receiver),
            Receiver::Searched(_) => None,
        })
        .collect();
    if let Some(plain) = plain {
        return super::super::select_ready(&plain, also, timeout);
    }
    let ready = |receiver: &&Receiver<()>| match receiver {
        Receiver::Plain(receiver) => !receiver.is_empty(),
        Receiver::Searched(channel) => {
            let queue = channel.queue();
            !queue.values.is_empty() || queue.senders == 0
        }
    };
    let also_ready =
        || also.is_some_and(|also| !matches!(also.try_recv(), Err(TryRecvError::Empty)));
    while !receivers.iter().any(ready) && !also_ready() {
        shuttle::thread::yield_now();
    }
}
