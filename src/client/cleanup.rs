//! The cleanup thread: what a failed or abandoned call left in Redis, taken back once the
//! server can be reached again.
//!
//! A call whose answer never came may have left something behind: a fair waiter's place in
//! the queue, permits a take took, a lock that a dropped guard's release did not free. The
//! caller hands the undo (a script safe to send twice) to [`Cleanup::keep_trying`] and goes
//! on; the thread `redlease-cleanup` sends it at once, and again every [`RETRY_EVERY`] until
//! the server answers, or until what it undoes would have run out by itself (its `until`;
//! for a semaphore guard's release, whose permits never run out, the outage grace), when it
//! gives up with a warning. An undo that answers that a copy of what it undoes may
//! still come ([`undo_again`]: the try's deadline has not passed) is sent once more after
//! that deadline. (An undo of a call that timed out is also queued behind the call on its
//! connection by the caller, where it runs first if the server was only slow.) While the server cannot be reached, one failed undo ends the round: the others
//! wait for the next. The client owns the thread and stops it ([`Cleanup::stop`]): undos
//! still queued then are logged, and run out with their leases. Sends through the router;
//! knows nothing of the primitives. Its channel and lock are
//! [`client::sync`](crate::client::sync)'s: its threads' steps are searched in random
//! orders under the unit tests (`schedules`, run by `shuttle`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::client::call::route::Router;
use crate::client::sync::{Mutex, Receiver, RecvTimeoutError, Sender};
use crate::error::{Error, Result};
use crate::protocol::request::undo_again;
use crate::protocol::ScriptCall;

#[cfg(test)]
mod schedules;

/// How often the thread sends the undos it keeps again.
pub(crate) const RETRY_EVERY: Duration = Duration::from_millis(200);

/// One undo to send until it is answered.
pub(crate) struct Undo {
    /// What it undoes, for the log: `fair lock "jobs": place of <holder>`.
    pub(crate) what: String,
    pub(crate) call: ScriptCall,
    /// When what it undoes runs out by itself: no use sending it after.
    pub(crate) until: Instant,
    /// What to do with its answer, if anything (a release sent again tells the thread it
    /// may have handed the lock to how that turned out); run on the cleanup thread.
    pub(crate) then: Option<Answered>,
    /// Not sent before then (an undo that answered that a copy of what it undoes may still
    /// come, until then).
    pub(crate) after: Option<Instant>,
}

/// Takes the answer of an undo, on the cleanup thread.
pub(crate) type Answered = Box<dyn FnOnce(&redis::Value) + Send>;

/// What the thread did, for [`Stats`](crate::Stats).
#[derive(Default)]
pub(crate) struct CleanupCounts {
    pending: AtomicUsize,
    done: AtomicU64,
    abandoned: AtomicU64,
}

impl CleanupCounts {
    /// Undos queued now.
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Undos the server answered.
    pub(crate) fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Undos given up: what they undo ran out by itself first, or the manager stopped.
    pub(crate) fn abandoned(&self) -> u64 {
        self.abandoned.load(Ordering::Relaxed)
    }
}

pub(crate) struct Cleanup {
    /// Dropped to stop the thread (the only sender: its receiver then disconnects).
    inbox: Mutex<Option<Sender<Undo>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    counts: Arc<CleanupCounts>,
}

impl Cleanup {
    /// Starts the thread, which sends through `router`.
    pub(crate) fn start(router: Arc<Router>) -> Result<Cleanup> {
        let (sender, receiver) = crate::client::sync::unbounded();
        let counts = Arc::new(CleanupCounts::default());
        let thread = std::thread::Builder::new()
            .name("redlease-cleanup".into())
            .spawn({
                let counts = Arc::clone(&counts);
                move || run(|undo| router.run_script(&undo.call), &receiver, &counts)
            })
            .map_err(Error::ThreadSpawn)?;
        Ok(Cleanup {
            inbox: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
            counts,
        })
    }

    /// Queues `undo`, to be sent until the server answers it.
    pub(crate) fn keep_trying(&self, undo: Undo) {
        log::debug!("{}: undo queued", undo.what);
        match &*self.inbox.lock() {
            Some(inbox) => {
                self.counts.pending.fetch_add(1, Ordering::Relaxed);
                let _ = inbox.send(undo);
            }
            None => {
                log::warn!("{}: not undone: the manager is shut down", undo.what);
                self.counts.abandoned.fetch_add(1, Ordering::Relaxed);
                crate::client::telemetry::cleanup_ended(false);
            }
        }
    }

    pub(crate) fn counts(&self) -> &CleanupCounts {
        &self.counts
    }

    /// Stops the thread and joins it.
    pub(crate) fn stop(&self) {
        self.inbox.lock().take();
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread: receives undos, and sends those it keeps (by `send`) every [`RETRY_EVERY`]
/// until each is answered or out of time; ends when its inbox disconnects.
fn run(
    send: impl Fn(&Undo) -> Result<redis::Value>,
    inbox: &Receiver<Undo>,
    counts: &CleanupCounts,
) {
    let mut kept: Vec<Undo> = Vec::new();
    loop {
        let received = if kept.is_empty() {
            match inbox.recv() {
                Ok(undo) => undo,
                Err(_) => break,
            }
        } else {
            match inbox.recv_timeout(RETRY_EVERY) {
                Ok(undo) => undo,
                Err(RecvTimeoutError::Timeout) => {
                    send_round(&send, &mut kept, counts);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        };
        kept.push(received);
        kept.extend(inbox.try_iter());
        send_round(&send, &mut kept, counts);
    }
    for undo in kept {
        abandon(&undo, counts, "the manager is shut down");
    }
}

/// Sends each kept undo once, keeping those that failed; the first that cannot reach the
/// server ends the round (the rest would not either).
fn send_round(
    send: &impl Fn(&Undo) -> Result<redis::Value>,
    kept: &mut Vec<Undo>,
    counts: &CleanupCounts,
) {
    let now = Instant::now();
    let (expired, live): (Vec<Undo>, Vec<Undo>) = std::mem::take(kept)
        .into_iter()
        .partition(|undo| undo.until <= now);
    for undo in expired {
        abandon(&undo, counts, "what it undoes has run out by itself");
    }
    let (live, waiting): (Vec<Undo>, Vec<Undo>) = live
        .into_iter()
        .partition(|undo| undo.after.is_none_or(|after| after <= now));
    kept.extend(waiting);
    let mut live = live.into_iter();
    for mut undo in live.by_ref() {
        let answer = send(&undo);
        if let Some(left) = answer.as_ref().ok().and_then(undo_again) {
            log::debug!(
                "{}: undone; sent again once no late copy can come",
                undo.what
            );
            undo.after = Some(Instant::now() + left + RETRY_EVERY);
            kept.push(undo);
            continue;
        }
        match answer {
            Ok(answer) => {
                log::debug!("{}: undone", undo.what);
                if let Some(then) = undo.then.take() {
                    then(&answer);
                }
                counts.pending.fetch_sub(1, Ordering::Relaxed);
                counts.done.fetch_add(1, Ordering::Relaxed);
                crate::client::telemetry::cleanup_ended(true);
            }
            Err(err) if err.is_outage() => {
                log::debug!("{}: the undo failed again: {err}", undo.what);
                kept.push(undo);
                break;
            }
            Err(err) => {
                // The server answered, with an error the same undo would meet again.
                log::warn!("{}: the undo was refused: {err}", undo.what);
                counts.pending.fetch_sub(1, Ordering::Relaxed);
                counts.abandoned.fetch_add(1, Ordering::Relaxed);
                crate::client::telemetry::cleanup_ended(false);
            }
        }
    }
    kept.extend(live);
}

fn abandon(undo: &Undo, counts: &CleanupCounts, why: &str) {
    log::warn!("{}: not undone: {why}", undo.what);
    counts.pending.fetch_sub(1, Ordering::Relaxed);
    counts.abandoned.fetch_add(1, Ordering::Relaxed);
    crate::client::telemetry::cleanup_ended(false);
}
