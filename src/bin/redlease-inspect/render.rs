//! The plain-text output of each command (the JSON output is the reports' serde form).

use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::break_lock::Freed;
use crate::doctor::Checkup;
use crate::probe::{Holder, Leader, Permit, Queue, Report, Role};
use crate::scan::{ListedLock, Listing};
use crate::top::Top;

/// A remaining time in ms, for people: `412 ms`, `29.412 s`.
fn duration(ms: i64) -> String {
    if ms.abs() < 1000 {
        format!("{ms} ms")
    } else {
        format!(
            "{}{}.{:03} s",
            if ms < 0 { "-" } else { "" },
            ms.abs() / 1000,
            ms.abs() % 1000
        )
    }
}

fn lease(lease_ms: Option<i64>) -> String {
    lease_ms.map_or_else(|| "no expiry".to_owned(), duration)
}

/// `client <id>  chain/thread <n>`, or the whole id when it has no number.
fn who(id: &str, client_id: &str, number: Option<u64>) -> String {
    match number {
        Some(number) => format!("client {client_id}  chain/thread {number}"),
        None => format!("id {id}"),
    }
}

fn holder_line(holder: &Holder) -> String {
    let role = match holder.role {
        Role::Holder => "holder",
        Role::Reader => "reader",
        Role::Upgradable => "upgradable reader",
        Role::Writer => "writer",
    };
    let mut line = format!(
        "  {role}  {}  count {}",
        who(&holder.id, &holder.client_id, holder.chain_or_thread),
        holder.count
    );
    if !holder.read_level_leases_ms.is_empty() {
        let levels: Vec<String> = holder
            .read_level_leases_ms
            .iter()
            .map(|level| level.map_or_else(|| "gone".to_owned(), duration))
            .collect();
        let _ = write!(line, "  read levels: {}", levels.join(", "));
    }
    line
}

pub fn report(report: &Report) -> String {
    let mut out = String::new();
    state_fields(&mut out, report);
    value_fields(&mut out, report);
    if let Some(leader) = &report.leader {
        field(&mut out, "leader", leader_line(leader));
    }
    let held_lock = report.kind.is_lock() && report.held;
    if held_lock {
        field(&mut out, "holders", report.holders.len().to_string());
        for holder in &report.holders {
            let _ = writeln!(out, "{}", holder_line(holder));
        }
    }
    if let Some(permits) = &report.permits_out {
        permits_out(&mut out, permits);
    }
    if let Some(queue) = &report.queue {
        fair_queue(&mut out, queue);
    }
    waiting(&mut out, report);
    if held_lock {
        let _ = writeln!(
            out,
            "(chain/thread: the number in the holder id; redlease numbers each chain of \
             reentrant holds, Redisson each thread)"
        );
    }
    out
}

/// What the name is and in which state: its kind, a note, held or free, the mode, and how
/// long its lease or expiry has left.
fn state_fields(out: &mut String, report: &Report) {
    field(out, "name", report.name.clone());
    field(out, "kind", report.kind.describe().to_owned());
    if let Some(note) = &report.note {
        field(out, "note", note.clone());
    }
    if report.kind.is_lock() {
        let state = if report.held { "held" } else { "free" };
        field(out, "state", state.to_owned());
    }
    if let Some(mode) = &report.mode {
        field(out, "mode", mode.clone());
    }
    if report.kind.is_lock() && report.held {
        field(out, "lease left", lease(report.lease_ms));
    } else if let Some(ms) = report.lease_ms {
        field(out, "expires in", duration(ms));
    }
}

/// The values under the name: its fencing token, and a count or permits.
fn value_fields(out: &mut String, report: &Report) {
    if let Some(token) = report.fencing_token {
        field(out, "fencing token", token.to_string());
    }
    match (report.count, report.permits) {
        (Some(value), Some(_)) => field(
            out,
            "value",
            format!("{value} (a semaphore's available permits, or a latch's count)"),
        ),
        (Some(count), None) => field(out, "count", count.to_string()),
        (None, Some(permits)) => field(out, "permits", format!("{permits} available")),
        (None, None) => {}
    }
}

/// An election's leader: its value, term, how long it has led, and its holder id.
fn leader_line(leader: &Leader) -> String {
    let since = UNIX_EPOCH + Duration::from_millis(leader.since_ms);
    let for_ms = SystemTime::now()
        .duration_since(since)
        .map_or(0, |lasted| lasted.as_millis() as i64);
    format!(
        "{}  term {}  for {}  (holder {})",
        leader.value,
        leader.term,
        duration(for_ms),
        leader.holder_id
    )
}

/// How many connections listen on the name's channel (a fair lock's waiters, each on its
/// own).
fn waiting(out: &mut String, report: &Report) {
    let fair_suffix = if report.queue.is_some() {
        ":<holder id>"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "{:<15} {} listening on {}{fair_suffix}",
        "waiting:",
        plural(report.subscribers, "connection"),
        report.channel
    );
}

/// The permits taken, each with the end of its lease.
fn permits_out(out: &mut String, permits: &[Permit]) {
    let _ = writeln!(out, "{:<15} {}", "permits out:", permits.len());
    for permit in permits {
        let _ = writeln!(
            out,
            "  {}  expires in {}",
            permit.id,
            duration(permit.expires_in_ms)
        );
    }
}

/// A fair lock's queue, in order, with each waiter's place.
fn fair_queue(out: &mut String, queue: &Queue) {
    let _ = writeln!(out, "{:<15} {} waiting", "queue:", queue.length);
    for (position, waiter) in queue.waiters.iter().enumerate() {
        let place = waiter.place_expires_in_ms.map_or_else(
            || "no place entry".to_owned(),
            |ms| {
                if ms > 0 {
                    format!("place kept {}", duration(ms))
                } else {
                    "place expired".to_owned()
                }
            },
        );
        let _ = writeln!(
            out,
            "  {}. {}  {place}{}",
            position + 1,
            who(&waiter.id, &waiter.client_id, waiter.chain_or_thread),
            if waiter.listening { "  listening" } else { "" }
        );
    }
    if (queue.waiters.len() as u64) < queue.length {
        let _ = writeln!(
            out,
            "  ... and {} more",
            queue.length - queue.waiters.len() as u64
        );
    }
}

/// One `label:   value` line, values aligned.
fn field(out: &mut String, label: &str, value: String) {
    let _ = writeln!(out, "{:<15} {value}", format!("{label}:"));
}

fn plural(count: u64, what: &str) -> String {
    if count == 1 {
        format!("1 {what}")
    } else {
        format!("{count} {what}s")
    }
}

pub fn listing(listing: &Listing) -> String {
    let mut out = String::new();
    if listing.locks.is_empty() {
        let _ = writeln!(out, "no held locks match {:?}", listing.pattern);
        return out;
    }
    let rows: Vec<[String; 4]> = listing.locks.iter().map(listed_row).collect();
    let header = ["NAME", "KIND", "LEASE", "HOLDERS"].map(str::to_owned);
    let widths: Vec<usize> = (0..3)
        .map(|column| {
            std::iter::once(&header)
                .chain(&rows)
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in std::iter::once(&header).chain(&rows) {
        let _ = writeln!(
            out,
            "{:<w0$}  {:<w1$}  {:<w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
    }
    if !listing.complete {
        let _ = writeln!(
            out,
            "(stopped at {}: raise --limit or narrow the pattern)",
            plural(listing.locks.len() as u64, "lock")
        );
    }
    out
}

/// A listed lock's row: its name, kind (and mode), lease, and holders with their counts.
fn listed_row(lock: &ListedLock) -> [String; 4] {
    let mut kind = lock.kind.describe().to_owned();
    if let Some(mode) = &lock.mode {
        let _ = write!(kind, " ({mode})");
    }
    let holders: Vec<String> = lock
        .holders
        .iter()
        .map(|holder| {
            let writer = match holder.role {
                Role::Writer => " writer",
                Role::Upgradable => " upgradable",
                _ => "",
            };
            format!("{} x{}{writer}", holder.id, holder.count)
        })
        .collect();
    [
        lock.name.clone(),
        kind,
        lease(lock.lease_ms),
        holders.join(", "),
    ]
}

pub fn freed(freed: &Freed) -> String {
    let holders: Vec<&str> = freed
        .holders
        .iter()
        .map(|holder| holder.id.as_str())
        .collect();
    format!(
        "freed {} {:?} (held by {})\n",
        freed.kind.describe(),
        freed.name,
        holders.join(", ")
    )
}

/// The most waited-for locks, a line each, then the cycles.
pub fn top(top: &Top) -> String {
    let mut text = format!(
        "{:<30} {:<16} {:>8} {:>10}  HOLDERS\n",
        "NAME", "KIND", "WAITERS", "LEASE"
    );
    for lock in &top.locks {
        let lease = lock.lease_ms.map_or_else(|| "-".to_owned(), duration);
        let _ = writeln!(
            text,
            "{:<30} {:<16} {:>8} {:>10}  {}",
            lock.name,
            lock.kind.describe(),
            lock.listening + lock.queued,
            lease,
            lock.holders.join(" ")
        );
    }
    for cycle in &top.cycles {
        let _ = writeln!(
            text,
            "cycle: processes {} wait for each other's fair locks {}",
            cycle.clients.join(", "),
            cycle.locks.join(", ")
        );
    }
    if !top.complete {
        text.push_str("(the scan stopped at its limit: more locks are held)\n");
    }
    text
}

/// The doctor's findings, each with its risk and fix, or that there are none.
pub fn checkup(checkup: &Checkup) -> String {
    if checkup.findings.is_empty() {
        return "nothing found: no setting read puts locks at risk\n".to_owned();
    }
    let mut text = String::new();
    for found in &checkup.findings {
        let _ = writeln!(
            text,
            "{}: {}\n  risk: {}\n  fix:  {}",
            found.server, found.found, found.risk, found.fix
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_seconds_or_milliseconds() {
        assert_eq!(duration(412), "412 ms");
        assert_eq!(duration(29_412), "29.412 s");
        assert_eq!(duration(-1_500), "-1.500 s");
        assert_eq!(lease(None), "no expiry");
    }
}
