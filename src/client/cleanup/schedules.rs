//! The cleanup thread's promises under the orders of its threads' steps, searched by
//! `shuttle`: two callers queue undos (one the server answers only at its second send, one
//! at once, one it refuses) while the manager stops the thread at any point. The thread's
//! channel and lock are `shuttle`'s here (see [`client::sync`](crate::client::sync)): the
//! threads switch at every send, receive and lock.
//!
//! The promises: every undo queued ends once, answered, refused or abandoned (the counts add
//! up, none left pending); an undo's answer is handed on (`then`) once, and only when the
//! server answered it; an undo answered or refused is not sent again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shuttle::thread;

use super::{run, Cleanup, CleanupCounts, Undo};
use crate::client::sync::searched::{search_random, Events};
use crate::error::{Error, Result};
use crate::protocol::script::{LuaScript, ScriptCall, ScriptRef};

/// The random orders searched.
const ORDERS: usize = 3000;

/// What happened, in order.
#[derive(Clone, Debug, PartialEq)]
enum Event {
    /// An undo was sent ...
    Sent(&'static str),
    /// ... and the server answered it.
    Answered(&'static str),
    /// Its answer was handed on.
    Then(&'static str),
}

/// The undo `what`, whose answer is handed on to `events`.
fn undo(what: &'static str, events: &Arc<Events<Event>>) -> Undo {
    let script = ScriptRef::Shared(Arc::new(LuaScript::owned("return 1".to_owned())));
    let told = Arc::clone(events);
    Undo {
        what: what.to_owned(),
        call: ScriptCall::new(script, &[what]),
        until: Instant::now() + Duration::from_secs(3600),
        then: Some(Box::new(move |_| told.push(Event::Then(what)))),
        after: None,
    }
}

/// The server: `slow` is answered at its second send only (the first times out), `refused`
/// is refused, the others are answered.
fn server(events: &Events<Event>, undo: &Undo) -> Result<redis::Value> {
    let what = ["slow", "quick", "refused"]
        .into_iter()
        .find(|what| *what == undo.what)
        .expect("a known undo");
    events.push(Event::Sent(what));
    match what {
        "slow" if count(&events.all(), &Event::Sent(what)) == 1 => {
            Err(Error::Timeout(Duration::from_secs(1)))
        }
        "refused" => Err(Error::Redis(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "refused",
        )))),
        _ => {
            events.push(Event::Answered(what));
            Ok(redis::Value::Int(1))
        }
    }
}

/// How many times `event` happened.
fn count(events: &[Event], event: &Event) -> usize {
    events.iter().filter(|seen| *seen == event).count()
}

/// How many runs made what the search is for.
#[derive(Default)]
struct Seen {
    /// An undo was answered when sent again.
    sent_again: AtomicUsize,
    /// An undo was given up at the stop (or queued after it).
    given_up: AtomicUsize,
}

/// Runs the callers, the thread and the stop once, in the order shuttle chose, checks the
/// promises, and counts what it made into `seen`.
fn run_once(seen: &Seen) {
    let events = Arc::new(Events::new());
    let (sender, inbox) = crate::client::sync::unbounded();
    let counts = Arc::new(CleanupCounts::default());
    let cleanup = Arc::new(Cleanup {
        inbox: crate::client::sync::Mutex::new(Some(sender)),
        thread: crate::client::sync::Mutex::new(None),
        counts: Arc::clone(&counts),
    });
    let thread = {
        let (events, counts) = (Arc::clone(&events), Arc::clone(&counts));
        thread::spawn(move || run(|undo| server(&events, undo), &inbox, &counts))
    };
    let callers: Vec<_> = [&["slow"][..], &["quick", "refused"]]
        .into_iter()
        .map(|whats| {
            let (cleanup, events) = (Arc::clone(&cleanup), Arc::clone(&events));
            thread::spawn(move || {
                for what in whats {
                    cleanup.keep_trying(undo(what, &events));
                }
            })
        })
        .collect();
    thread::yield_now();
    cleanup.stop();
    thread.join().expect("the cleanup thread");
    for caller in callers {
        caller.join().expect("a caller");
    }
    let events = events.all();
    check(&events, &counts);
    let refused = count(&events, &Event::Sent("refused")) as u64;
    for (made, counter) in [
        (count(&events, &Event::Sent("slow")) == 2, &seen.sent_again),
        (counts.abandoned() > refused, &seen.given_up),
    ] {
        counter.fetch_add(usize::from(made), Ordering::SeqCst);
    }
}

/// The promises, from what happened.
fn check(events: &[Event], counts: &CleanupCounts) {
    let count = |event: Event| count(events, &event);
    let answered = count(Event::Answered("slow")) + count(Event::Answered("quick"));
    assert_eq!(counts.pending(), 0, "an undo left pending: {events:?}");
    assert_eq!(
        counts.done() + counts.abandoned(),
        3,
        "undos ended {} times: {events:?}",
        counts.done() + counts.abandoned()
    );
    assert_eq!(counts.done(), answered as u64, "{events:?}");
    for what in ["slow", "quick", "refused"] {
        let handed_on = count(Event::Then(what));
        assert!(
            handed_on <= 1,
            "{what}'s answer handed on twice: {events:?}"
        );
        assert_eq!(
            handed_on,
            count(Event::Answered(what)),
            "{what}: {events:?}"
        );
    }
    assert!(count(Event::Sent("quick")) <= 1, "sent again: {events:?}");
    assert!(count(Event::Sent("refused")) <= 1, "sent again: {events:?}");
    assert!(count(Event::Sent("slow")) <= 2, "sent again: {events:?}");
}

/// Some orders send an undo again, and some give one up.
#[test]
fn every_undo_ends_once_in_random_orders() {
    let seen = Arc::new(Seen::default());
    search_random(ORDERS, {
        let seen = Arc::clone(&seen);
        move || run_once(&seen)
    });
    assert!(
        seen.sent_again.load(Ordering::SeqCst) > 0,
        "never sent again"
    );
    assert!(seen.given_up.load(Ordering::SeqCst) > 0, "never given up");
}
