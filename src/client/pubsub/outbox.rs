//! Commands for the subscribed connection: queued under the hub's lock, written outside it.
//!
//! A thread that queues a command then calls [`flush`]. Whichever thread finds no one
//! writing becomes the writer: it takes everything queued, lets go of the hub's lock, writes,
//! takes the lock again, and goes on until the queue is empty. A thread that finds a writer
//! at work returns at once; the writer will send its command. So a server that stops reading
//! (a frozen process, a full socket buffer) stalls the writer alone, for at most the write
//! timeout, while every other thread can still take the hub's lock: to join a channel
//! already subscribed, to leave, to read `is_live`, and the listener to hand out wakes.
//!
//! How the races resolve:
//! - Order: commands are queued in the order the hub decides them (under its lock), and one
//!   writer at a time takes them off the front in that order, so Redis sees SUBSCRIBE and
//!   UNSUBSCRIBE for a channel in the order the hub's counts assume.
//! - No command left behind: the writer checks for an empty queue and gives up its role in
//!   one critical section, and a thread queues a command and looks for a writer under the
//!   same lock, so either the writer sees the command or the thread becomes the writer.
//! - Connections: the queue belongs to one connection. Opening or closing one empties it,
//!   and the writer takes the writing handle together with each batch, so nothing queued
//!   for one connection is written to the next. Closing shuts the socket down, so a writer
//!   stalled on the old connection returns at once and takes the new connection's batch.
//! - Confirmation: a thread whose command another thread writes still waits in `subscribe`
//!   for Redis's answer (or the end of the connection, or its timeout), so handing the write
//!   over never lets a waiter return before its subscription is in place.
//! - Failure: a failed write shuts its socket down; the listener's read then ends, and it
//!   reconnects, which subscribes again and wakes every waiter. Waiters blocked on a
//!   confirmation see the connection go and return.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::transport::connection::Stream;
use crate::client::sync::{Mutex, MutexGuard};

#[derive(Default)]
pub(super) struct Outbox {
    /// The writing handle of the subscribed connection, while there is one.
    stream: Option<Arc<Stream>>,
    /// Packed commands not yet taken by the writer, in the order queued.
    queued: Vec<u8>,
    /// A thread is writing; it takes whatever is queued before it gives up the role.
    writing: bool,
}

impl Outbox {
    pub(super) fn is_open(&self) -> bool {
        self.stream.is_some()
    }

    /// Starts the queue for a new connection.
    pub(super) fn open(&mut self, writer: Stream) {
        self.close();
        self.stream = Some(Arc::new(writer));
    }

    /// Ends the connection and drops what was queued for it.
    pub(super) fn close(&mut self) {
        if let Some(stream) = self.stream.take() {
            stream.shutdown();
        }
        self.queued.clear();
    }

    /// Ends the connection but leaves it to the listener to close the outbox.
    pub(super) fn shut_down(&self) {
        if let Some(stream) = &self.stream {
            stream.shutdown();
        }
    }

    /// Queues one command; answers `false` (and queues nothing) without a connection.
    pub(super) fn queue(&mut self, command: &str, args: impl redis::ToRedisArgs) -> bool {
        if self.stream.is_none() {
            return false;
        }
        let packed = redis::cmd(command).arg(args).get_packed_command();
        self.queued.extend_from_slice(&packed);
        true
    }
}

/// Writes everything queued in the outbox of the hub's `state` (`outbox_of` finds it),
/// unless another thread is writing already (it will write what this thread queued). Never
/// writes while holding the hub's lock; each batch gets at most `write_timeout`.
pub(super) fn flush<S>(
    state: &Mutex<S>,
    outbox_of: fn(&mut S) -> &mut Outbox,
    write_timeout: Duration,
) {
    let mut state = state.lock();
    if outbox_of(&mut state).writing {
        return;
    }
    outbox_of(&mut state).writing = true;
    loop {
        let outbox = outbox_of(&mut state);
        let stream = match &outbox.stream {
            Some(stream) if !outbox.queued.is_empty() => Arc::clone(stream),
            _ => {
                outbox.writing = false;
                return;
            }
        };
        let batch = std::mem::take(&mut outbox.queued);
        let written = MutexGuard::unlocked(&mut state, || {
            stream.write_all_by(&batch, Instant::now() + write_timeout)
        });
        if let Err(err) = written {
            log::debug!("pub/sub write failed: {err}");
            // The listener notices and reconnects; what is still queued for this
            // connection would fail the same way.
            stream.shutdown();
            let outbox = outbox_of(&mut state);
            if outbox
                .stream
                .as_ref()
                .is_some_and(|current| Arc::ptr_eq(current, &stream))
            {
                outbox.queued.clear();
            }
        }
    }
}
