//! The line's promises under the orders of its threads' steps, searched by `shuttle`: every
//! order for one waiter and a releaser (depth-first), random orders from a fixed seed for
//! two waiters. A release's offer goes to the first waiter still waiting; a lock it hands to
//! a waiter is used by that waiter, or taken back once (by the waiter leaving with it, or by
//! the releaser finding the waiter gone), never both, never lost; a release that hands
//! nothing leaves nothing to take back; no place is left behind.
//!
//! Each call of the line is one step (its critical sections run whole: the threads switch
//! only between calls, at `yield_now`), so the search covers the orders of the calls, not
//! the instants inside one. A failing order is printed as a schedule `shuttle::replay` runs
//! again.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use shuttle::thread;

use super::{Handed, Lines, Outcome, Place};
use crate::client::pubsub::Subscription;

const NAME: &str = "lock";
const TOKEN: u64 = 7;
/// The random orders of each two waiters' case, and their seed.
const ORDERS: usize = 5000;
const SEED: u64 = 0x5eed;

/// How a waiter's wait ends when it took no grant from its place.
#[derive(Clone, Copy, Debug)]
enum End {
    /// It gives up (its deadline passed).
    Leaves,
    /// Its own try found the lock its own (taken itself, or handed to it).
    Keeps,
}

/// One case: what the release does with its offer, and how each waiter ends (the second
/// joins the line behind the first).
#[derive(Clone, Copy, Debug)]
struct Case {
    hands: bool,
    unanswered_first: bool,
    ends: &'static [End],
}

/// The line, and who joined it and who is gone from it (left or kept its hold), in order.
struct Shared {
    lines: Lines,
    joined: Mutex<Vec<String>>,
    gone: Mutex<Vec<String>>,
}

impl Shared {
    fn new() -> Self {
        Shared {
            lines: Lines::new(3),
            joined: Mutex::default(),
            gone: Mutex::default(),
        }
    }
}

/// What a waiter did: took a grant (its token), or kept its own try's hold, or left with a
/// grant to take back; and how many wakes it had.
#[derive(Debug, Default)]
struct Waited {
    took: Option<u64>,
    kept: bool,
    takes_back: bool,
    woken: usize,
}

type Waiting = thread::JoinHandle<Vec<(String, Waited)>>;

/// The waiters whose ends are `ends` (one at least), the first first in the line: each
/// joins it, starts the next (which joins behind it), and waits. Their holder ids, with what
/// each did.
fn waiters(shared: Arc<Shared>, ends: &'static [End]) -> Waiting {
    thread::spawn(move || {
        let (&end, behind) = ends.split_first().expect("a waiter");
        let holder = format!("waiter{}", ends.len());
        let (subscription, waker) = Subscription::local();
        let place = shared.lines.join(NAME, &holder, 1000, waker);
        shared.joined.lock().unwrap().push(holder.clone());
        let next = (!behind.is_empty()).then(|| waiters(Arc::clone(&shared), behind));
        let waited = wait(place, end, &subscription);
        shared.gone.lock().unwrap().push(holder.clone());
        let mut all = next.map_or_else(Vec::new, |next| next.join().expect("a waiter"));
        all.push((holder, waited));
        all
    })
}

/// A waiter's wait from its `place`: looks for a grant twice, then ends as `end` says.
fn wait(place: Place<'_>, end: End, subscription: &Subscription) -> Waited {
    let mut waited = Waited::default();
    for _ in 0..2 {
        thread::yield_now();
        if let Some(handed) = place.take_grant() {
            waited.took = Some(handed.token);
            break;
        }
    }
    thread::yield_now();
    match (waited.took, end) {
        (Some(_), _) | (None, End::Keeps) => {
            place.kept();
            waited.kept = waited.took.is_none();
        }
        (None, End::Leaves) => waited.takes_back = place.leave(),
    }
    waited.woken = subscription.woken().try_iter().count();
    waited
}

/// The releaser: asks for an offer (which must go to the first waiter still in the line),
/// may lose the release's first answer, and settles it. Answers whom the offer went to, if
/// anyone, and whether it takes the hold back.
fn releaser(shared: &Shared, case: Case) -> (Option<String>, bool) {
    thread::yield_now();
    let offer = shared.lines.offer(NAME);
    let gone = shared.gone.lock().unwrap().clone();
    let first = shared
        .joined
        .lock()
        .unwrap()
        .iter()
        .find(|holder| !gone.contains(holder))
        .cloned();
    let offered = offer.as_ref().map(|offer| offer.holder().to_owned());
    assert_eq!(
        offered, first,
        "{case:?}: offered to another than the first"
    );
    let Some(offer) = offer else {
        return (None, false);
    };
    thread::yield_now();
    if case.unanswered_first {
        offer.unknown();
        thread::yield_now();
    }
    let outcome = match case.hands {
        true => Outcome::Handed(Handed {
            token: TOKEN,
            sent_at: Instant::now(),
        }),
        false => Outcome::NotHanded,
    };
    (offered, offer.settle(outcome))
}

/// Runs `case` once, in the order shuttle chose, and checks the promises.
fn run(case: Case) {
    let shared = Arc::new(Shared::new());
    let waiting = waiters(Arc::clone(&shared), case.ends);
    let releasing = {
        let shared = Arc::clone(&shared);
        thread::spawn(move || releaser(&shared, case))
    };
    let waited = waiting.join().expect("the waiters");
    let (offered, releaser_takes_back) = releasing.join().expect("the releaser");
    assert!(
        case.hands || !releaser_takes_back,
        "{case:?}: a release that handed nothing takes a hold back"
    );
    for (holder, waited) in &waited {
        let handed = case.hands && offered.as_deref() == Some(holder.as_str());
        check(case, waited, handed, releaser_takes_back && handed);
    }
    assert!(
        !shared.lines.has_waiters(NAME),
        "{case:?}: a place left behind"
    );
}

/// The promises, for one waiter: `handed` the lock or not, and whether the releaser takes
/// back the hold it handed it.
fn check(case: Case, waited: &Waited, handed: bool, releaser_takes_back: bool) {
    let used = waited.took.is_some() || (waited.kept && handed);
    let taken_back = usize::from(waited.takes_back) + usize::from(releaser_takes_back);
    match handed {
        true => assert_eq!(
            usize::from(used) + taken_back,
            1,
            "{case:?}: a handed hold used {used}, taken back {taken_back} times ({waited:?})"
        ),
        false => assert!(
            waited.took.is_none() && taken_back == 0,
            "{case:?}: nothing handed to it, yet {waited:?}"
        ),
    }
    if let Some(token) = waited.took {
        assert_eq!(token, TOKEN, "{case:?}: the grant's token");
        assert!(waited.woken > 0, "{case:?}: a grant taken without a wake");
    }
}

/// Every case of the waiters' `ends`, searched in every order, or (`random`) in that many
/// random orders from a fixed seed, when every order is too many.
fn search(ends: &[&'static [End]], random: Option<usize>) {
    for hands in [true, false] {
        for unanswered_first in [false, true] {
            for &ends in ends {
                let case = Case {
                    hands,
                    unanswered_first,
                    ends,
                };
                match random {
                    None => shuttle::check_dfs(move || run(case), None),
                    Some(orders) => {
                        shuttle::check_random_with_seed(move || run(case), SEED, orders)
                    }
                }
            }
        }
    }
}

#[test]
fn a_handed_lock_is_used_or_taken_back_once_in_every_order() {
    search(&[&[End::Leaves], &[End::Keeps]], None);
}

#[test]
fn with_two_waiters_the_first_still_waiting_is_offered_in_random_orders() {
    let ends: [&[End]; 3] = [
        &[End::Leaves, End::Leaves],
        &[End::Leaves, End::Keeps],
        &[End::Keeps, End::Leaves],
    ];
    search(&ends, Some(ORDERS));
}
