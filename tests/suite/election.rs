//! Leader election across processes: a killed leader is replaced within its lease, a paused
//! one is replaced and finds its leadership lost before its next step, observers in other
//! processes see every change in order, and under random kills and pauses there is never
//! more than one leader (checked from the intervals each leader recorded).
//!
//! Every candidate and observer is a child process writing its events, stamped with the
//! host's monotonic clock, to a file of its own. A leader stamps each step *before* it
//! checks that it still leads: a step counts for the interval it claims only if the check
//! after the stamp passed.

use crate::common;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    child_role, env, events_path, eventually, manager, now_ns, server, signal, spawn_child,
    KillOnDrop, Random,
};
use redlease::{LeaderChange, LockManager};

const NAME: &str = "scheduler";
/// The candidates' watchdog timeout: the lease a dead leader keeps the leadership for.
const LEASE: Duration = Duration::from_secs(2);

/// One recorded event: what, of which term, when (ns of the monotonic clock).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Event {
    what: String,
    term: u64,
    at: u64,
}

fn record(file: &mut File, what: &str, term: u64, at: u64) {
    writeln!(file, "{what} {term} {at}").unwrap();
    file.flush().unwrap();
}

fn read_events(path: &Path) -> Vec<Event> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            Some(Event {
                what: parts.next()?.to_owned(),
                term: parts.next()?.parse().ok()?,
                at: parts.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// A throwaway folder for the children's event files.
struct EventDir(PathBuf);

impl EventDir {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("redlease-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        EventDir(dir)
    }

    fn events(&self, index: usize) -> Vec<Event> {
        read_events(&events_path(&self.0, index))
    }
}

impl Drop for EventDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spawn(role: &str, url: &str, dir: &EventDir, index: usize) -> KillOnDrop {
    let child = spawn_child(
        if role == "observe" {
            "election::observer_process"
        } else {
            "election::candidate_process"
        },
        role,
        &[
            ("REDLEASE_TEST_URL", url.to_owned()),
            ("REDLEASE_TEST_DIR", dir.0.display().to_string()),
            ("REDLEASE_TEST_INDEX", index.to_string()),
        ],
    );
    child
}

fn child_manager(url: &str) -> LockManager {
    LockManager::builder(url)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(LEASE)
        .outage_grace(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Child: a candidate that campaigns, works in steps while it leads (stamping each step
/// before it checks that it still leads), records the loss when it finds it, and in the
/// "resign" role resigns after a random while; then campaigns again.
#[test]
#[ignore = "a child process of the tests of this file"]
fn candidate_process() {
    let Some(role) = child_role() else { return };
    let index: usize = env("REDLEASE_TEST_INDEX").parse().unwrap();
    let mut events = OpenOptions::new()
        .create(true)
        .append(true)
        .open(events_path(Path::new(&env("REDLEASE_TEST_DIR")), index))
        .unwrap();
    let manager = child_manager(&env("REDLEASE_TEST_URL"));
    let election = manager.leader_election(NAME);
    let candidate = election.candidate(&format!("candidate-{index}"));
    let mut random = Random(0x9e37_79b9 + index as u64);
    loop {
        // Resigning candidates campaign until they lead; the others give up after a while,
        // and campaign again (a campaign given up must never be announced).
        let leading = match role.as_str() {
            "resign" => candidate.lock().unwrap(),
            _ => match candidate.try_lock_for(random.millis(100, 1500)) {
                Ok(Some(leading)) => leading,
                Ok(None) | Err(_) => continue,
            },
        };
        let term = leading.term();
        record(&mut events, "elected", term, now_ns());
        let resign_at = match role.as_str() {
            "resign" => Some(Instant::now() + random.millis(200, 1500)),
            _ => None,
        };
        loop {
            let at = now_ns();
            if leading.is_lost() {
                record(&mut events, "lost", term, now_ns());
                break;
            }
            record(&mut events, "working", term, at);
            if resign_at.is_some_and(|resign_at| Instant::now() >= resign_at) {
                let at = now_ns();
                if !leading.is_lost() {
                    record(&mut events, "resigned", term, at);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = leading.unlock();
    }
}

/// Child: an observer that records every change it is told.
#[test]
#[ignore = "a child process of the tests of this file"]
fn observer_process() {
    if child_role().as_deref() != Some("observe") {
        return;
    }
    let index: usize = env("REDLEASE_TEST_INDEX").parse().unwrap();
    let mut events =
        File::create(events_path(Path::new(&env("REDLEASE_TEST_DIR")), index)).unwrap();
    let manager = child_manager(&env("REDLEASE_TEST_URL"));
    let mut observer = manager.leader_election(NAME).observe().unwrap();
    record(&mut events, "observing", 0, now_ns());
    loop {
        match observer.next_change_for(Duration::from_secs(1)).unwrap() {
            Some(LeaderChange::Elected(leader)) => {
                let at = now_ns();
                record(&mut events, "elected", leader.term, at);
                // Whose election: "by-<candidate index>".
                let index = leader.value.trim_start_matches("candidate-");
                record(&mut events, &format!("by-{index}"), leader.term, at);
            }
            Some(LeaderChange::Resigned(leader)) => {
                record(&mut events, "resigned", leader.term, now_ns())
            }
            Some(_) | None => {}
        }
    }
}

/// The leadership intervals the candidates recorded, by term: from the election to the last
/// step that was checked (or the resignation).
fn intervals(dir: &EventDir, candidates: &[usize]) -> BTreeMap<u64, (u64, u64)> {
    let mut terms: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for &index in candidates {
        for event in dir.events(index) {
            let interval = terms.entry(event.term).or_insert((u64::MAX, 0));
            match event.what.as_str() {
                "elected" => interval.0 = event.at,
                "working" | "resigned" => interval.1 = interval.1.max(event.at),
                _ => {}
            }
        }
    }
    terms
}

/// No two leaders at any time: every checked step of a term comes before every later term's
/// election. (A leader paused between its grant and its first stamp stamps its election
/// late, which only makes the check more lenient for it, never wrong.)
fn assert_one_leader_at_a_time(terms: &BTreeMap<u64, (u64, u64)>) {
    for (&term, &(_, end)) in terms {
        for (&later, &(start, _)) in terms.range(term + 1..) {
            assert!(
                end < start,
                "term {term} worked until {end}, after term {later} was elected at {start}"
            );
        }
    }
}

/// The index of the candidate that leads in `term`.
fn leader_of(dir: &EventDir, candidates: &[usize], term: u64) -> usize {
    *candidates
        .iter()
        .find(|&&index| {
            dir.events(index)
                .iter()
                .any(|event| event.what == "elected" && event.term == term)
        })
        .expect("a candidate elected in the term")
}

/// The indexes of every candidate started so far.
fn every_so_far(next_index: usize) -> Vec<usize> {
    (0..next_index).collect()
}

/// The latest term any of `candidates` was elected in, if any.
fn latest_term(dir: &EventDir, candidates: &[usize]) -> Option<u64> {
    candidates
        .iter()
        .flat_map(|&index| dir.events(index))
        .filter(|event| event.what == "elected")
        .map(|event| event.term)
        .max()
}

#[test]
fn a_killed_leader_is_replaced_within_its_lease_and_observers_see_it() {
    let redis = server();
    let dir = EventDir::new("election-kill");
    let url = redis.url();
    let _observer = spawn("observe", &url, &dir, 9);
    assert!(eventually(Duration::from_secs(10), || !dir
        .events(9)
        .is_empty()));
    let mut candidates: Vec<KillOnDrop> = (0..3).map(|i| spawn("lead", &url, &dir, i)).collect();
    let all = [0, 1, 2];
    assert!(eventually(Duration::from_secs(20), || latest_term(
        &dir, &all
    )
    .is_some()));
    let first = latest_term(&dir, &all).unwrap();
    let leader = leader_of(&dir, &all, first);

    let killed_at = now_ns();
    candidates[leader].kill().unwrap();
    assert!(eventually(Duration::from_secs(20), || latest_term(
        &dir, &all
    ) > Some(first)));
    let second = latest_term(&dir, &all).unwrap();
    let successor = leader_of(&dir, &all, second);
    let elected_at = dir
        .events(successor)
        .iter()
        .find(|event| event.what == "elected" && event.term == second)
        .unwrap()
        .at;
    let takeover = Duration::from_nanos(elected_at - killed_at);
    println!("a killed leader was replaced {takeover:?} after the kill (lease {LEASE:?})");
    // Within one lease of the last renewal, and so of the kill; the bound only proves that
    // the takeover does not wait for something else.
    assert!(takeover < LEASE * 3, "{takeover:?}");

    // The observer, in a process of its own, saw both elections, in order (and any other a
    // missed renewal under load may have caused between them).
    let seen = || -> Vec<u64> {
        dir.events(9)
            .iter()
            .filter(|event| event.what == "elected")
            .map(|event| event.term)
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(10), || seen().contains(&second)),
        "observer: {:?}",
        dir.events(9)
    );
    let seen = seen();
    assert!(seen.windows(2).all(|pair| pair[0] < pair[1]), "{seen:?}");
    assert!(seen.contains(&first), "{seen:?}");
    // Anyone can read the leader.
    let manager = manager(&redis, Duration::from_secs(30));
    let now = manager.leader_election(NAME).leader().unwrap().unwrap();
    assert!(now.term >= second);
    assert!(eventually(Duration::from_secs(10), || latest_term(
        &dir, &all
    ) >= Some(now.term)));
    let leading = leader_of(&dir, &all, now.term);
    assert_eq!(now.value, format!("candidate-{leading}"));
    assert_ne!(leading, leader, "the killed leader leads again");
    assert_one_leader_at_a_time(&intervals(&dir, &all));
}

#[test]
fn a_paused_leader_is_replaced_and_finds_its_loss_before_its_next_step() {
    let redis = server();
    let dir = EventDir::new("election-pause");
    let url = redis.url();
    let candidates: Vec<KillOnDrop> = (0..2).map(|i| spawn("lead", &url, &dir, i)).collect();
    let all = [0, 1];
    assert!(eventually(Duration::from_secs(20), || latest_term(
        &dir, &all
    )
    .is_some()));
    let first = latest_term(&dir, &all).unwrap();
    let paused = leader_of(&dir, &all, first);

    signal(&candidates[paused], libc::SIGSTOP);
    assert!(
        eventually(Duration::from_secs(20), || latest_term(&dir, &all)
            > Some(first)),
        "nobody replaced the paused leader"
    );
    let second = latest_term(&dir, &all).unwrap();
    assert_ne!(leader_of(&dir, &all, second), paused);
    signal(&candidates[paused], libc::SIGCONT);
    assert!(eventually(Duration::from_secs(10), || dir
        .events(paused)
        .iter()
        .any(|event| event.what == "lost" && event.term == first)));

    // No step of the paused leader after its successor's election: the first thing it did
    // on waking was to find the loss.
    let terms = intervals(&dir, &all);
    assert_one_leader_at_a_time(&terms);
    let events = dir.events(paused);
    let lost = events
        .iter()
        .position(|event| event.what == "lost" && event.term == first)
        .unwrap();
    let elected_second = terms[&second].0;
    assert!(
        events[..lost]
            .iter()
            .all(|event| event.term != first || event.at < elected_second),
        "{events:?}"
    );
}

#[test]
fn one_leader_at_a_time_through_random_kills_and_pauses() {
    let seconds: u64 = std::env::var("REDLEASE_ELECTION_SECONDS")
        .ok()
        .and_then(|seconds| seconds.parse().ok())
        .unwrap_or(8);
    let redis = server();
    let dir = EventDir::new("election-random");
    let url = redis.url();
    let _observer = spawn("observe", &url, &dir, 99);
    assert!(eventually(Duration::from_secs(10), || !dir
        .events(99)
        .is_empty()));
    // Five candidates, two of which resign now and then; a killed one is replaced by a new
    // process with a new index.
    let role = |index: usize| {
        if index.is_multiple_of(2) {
            "resign"
        } else {
            "lead"
        }
    };
    let mut candidates: Vec<(usize, KillOnDrop)> = (0..5)
        .map(|index| (index, spawn(role(index), &url, &dir, index)))
        .collect();
    let mut next_index = 5;
    let mut random = Random(0x2545_f491_4f6c_dd1d);
    let (mut kills, mut pauses, mut server_pauses) = (0, 0, 0);
    let mut killed = Vec::new();
    let end = Instant::now() + Duration::from_secs(seconds);
    let first: Vec<usize> = (0..5).collect();
    assert!(eventually(Duration::from_secs(20), || latest_term(
        &dir, &first
    )
    .is_some()));
    let mut actions = 0;
    while Instant::now() < end {
        std::thread::sleep(random.millis(300, 1500));
        // Mostly the leader (always at first), so that leadership changes hands.
        let indexes: Vec<usize> = candidates.iter().map(|(index, _)| *index).collect();
        let leader = latest_term(&dir, &indexes)
            .and_then(|term| {
                let index = leader_of(&dir, &every_so_far(next_index), term);
                indexes.iter().position(|&candidate| candidate == index)
            })
            .filter(|_| actions < 3 || random.below(3) > 0);
        let victim = leader.unwrap_or_else(|| random.below(candidates.len() as u64) as usize);
        actions += 1;
        if actions > 2 && random.below(3) == 0 {
            // Redis itself pauses: campaigns that give up meanwhile run once it resumes.
            redis.pause().unwrap();
            std::thread::sleep(random.millis(300, 2000));
            redis.resume().unwrap();
            server_pauses += 1;
        } else if actions <= 2 || random.below(2) == 0 {
            killed.push(candidates[victim].0);
            candidates[victim].1.kill().unwrap();
            candidates[victim] = (next_index, spawn(role(next_index), &url, &dir, next_index));
            next_index += 1;
            kills += 1;
        } else {
            signal(&candidates[victim].1, libc::SIGSTOP);
            std::thread::sleep(random.millis(500, 3000));
            signal(&candidates[victim].1, libc::SIGCONT);
            pauses += 1;
        }
    }
    let every: Vec<usize> = (0..next_index).collect();
    let terms = intervals(&dir, &every);
    let last = *terms.keys().last().unwrap();
    assert!(eventually(Duration::from_secs(10), || {
        dir.events(99)
            .iter()
            .any(|event| event.what == "elected" && event.term >= last)
    }));
    drop(candidates);
    let terms = intervals(&dir, &every);
    println!(
        "{seconds} s, {kills} kills, {pauses} pauses of candidates, {server_pauses} of Redis: \
         {} terms, one leader at a time",
        terms.len()
    );
    // At least the first leader, killed by the first action, and its successor.
    assert!(terms.len() >= 2, "{terms:?}");
    assert_one_leader_at_a_time(&terms);
    // The observer saw every election, in order (and perhaps one more, of a candidate
    // killed before it could record its election).
    let seen: Vec<u64> = dir
        .events(99)
        .iter()
        .filter(|event| event.what == "elected")
        .map(|event| event.term)
        .collect();
    assert!(seen.windows(2).all(|pair| pair[0] < pair[1]), "{seen:?}");
    let recorded = terms.iter().filter(|(_, (start, _))| *start != u64::MAX);
    for (term, _) in recorded.filter(|(&term, _)| term <= last) {
        assert!(
            seen.contains(term),
            "the observer missed term {term}: {seen:?}"
        );
    }
    // Every election the observer was told of is one its candidate recorded: it held a
    // guard. (Save for a candidate killed between its announcement and its record.)
    for event in dir.events(99) {
        let Some(index) = event.what.strip_prefix("by-") else {
            continue;
        };
        let index: usize = index.parse().unwrap();
        if event.term > last || killed.contains(&index) {
            continue;
        }
        assert!(
            dir.events(index)
                .iter()
                .any(|own| own.what == "elected" && own.term == event.term),
            "the observer was told that candidate {index} was elected in term {}, which it \
             never led",
            event.term
        );
    }
}

/// A campaign whose caller gave up while Redis was paused (its try runs once Redis resumes,
/// and its undo right after) is never announced: no observer hears of a leader that held no
/// guard, and nobody reads one as the leader.
#[test]
fn a_campaign_given_up_while_redis_is_paused_is_never_announced() {
    let redis = server();
    let manager = LockManager::builder(redis.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(3))
        .outage_grace(Duration::from_secs(5))
        .build()
        .unwrap();
    let election = manager.leader_election("paused-campaign");
    let mut observer = election.observe().unwrap();
    // The scripts are loaded, so that the paused campaign is one call.
    drop(election.candidate("warm-up").lock().unwrap());
    assert!(matches!(
        observer.next_change().unwrap(),
        LeaderChange::Elected(_)
    ));
    assert!(matches!(
        observer.next_change().unwrap(),
        LeaderChange::Resigned(_)
    ));

    redis.pause().unwrap();
    let campaign = {
        let candidate = election.candidate("host-a");
        std::thread::spawn(move || candidate.try_lock_for(Duration::from_millis(800)).map(drop))
    };
    let outcome = campaign.join().unwrap();
    assert!(
        matches!(outcome, Ok(()) | Err(redlease::Error::Timeout(_))),
        "{outcome:?}"
    );
    redis.resume().unwrap();
    // The try ran after its caller gave up; its undo follows it.
    assert!(
        eventually(Duration::from_secs(10), || manager.stats().cleanup_pending
            == 0
            && !manager.lock("paused-campaign").is_locked().unwrap()),
        "the undone campaign left the lock held"
    );
    assert_eq!(election.leader().unwrap(), None);
    let heard = observer.next_change_for(Duration::from_secs(1)).unwrap();
    assert_eq!(
        heard, None,
        "an observer was told of a campaign that was undone"
    );
}
