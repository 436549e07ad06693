//! `break-lock`: frees a lock whoever holds it, after the operator confirms.
//!
//! The release goes through the library's own `break_lock` for the lock's kind (lock,
//! fair lock, or the write half of a read-write lock, which frees readers and writer), so
//! that every holder that is a redlease manager hears the force-release notice at once and
//! its guard reports `LostReason::ForceReleased`, and the next waiter is woken as the kind
//! wakes its waiters.

use redlease::redis::Connection;
use serde::Serialize;
use std::io::{BufRead, IsTerminal, Write};

use crate::connection::Failure;
use crate::deployment::Deployment;
use crate::probe::{self, Holder, Kind};

#[derive(Debug, Serialize)]
pub struct Freed {
    pub name: String,
    pub kind: Kind,
    /// Who held it just before (as read before asking).
    pub holders: Vec<Holder>,
    pub freed: bool,
}

pub struct Settings<'a> {
    /// Where the manager that frees it connects.
    pub deployment: &'a Deployment,
    /// Free it without asking.
    pub yes: bool,
}

/// Frees the lock `name`, asking on stderr and reading the answer from stdin unless
/// `settings.yes`.
pub fn break_lock(
    redis: &mut Connection,
    name: &str,
    settings: &Settings,
) -> Result<Freed, Failure> {
    let report = probe::probe(redis, name)?;
    if !report.kind.is_lock() {
        return Err(Failure::Usage(format!(
            "{name:?} is a {}: break-lock frees locks only",
            report.kind.describe()
        )));
    }
    if !report.held {
        return Err(Failure::NotFound(format!("{name:?} is not held")));
    }
    if !settings.yes && !confirmed(name, &report.holders)? {
        return Err(Failure::Declined(format!("{name:?} left as it is")));
    }
    let manager = settings.deployment.manager()?;
    let freed = match report.kind {
        Kind::FairLock => manager.fair_lock(name).break_lock(),
        Kind::ReadWriteLock => manager.read_write_lock(name).write().break_lock(),
        _ => manager.lock(name).break_lock(),
    };
    manager.shutdown();
    if !freed? {
        return Err(Failure::NotFound(format!(
            "{name:?} was freed by someone else meanwhile"
        )));
    }
    Ok(Freed {
        name: name.to_owned(),
        kind: report.kind,
        holders: report.holders,
        freed: true,
    })
}

/// Asks `Free lock NAME held by ...? [y/N]` on stderr; only `y` or `yes` on stdin frees it
/// (an empty line, anything else and the end of input do not).
fn confirmed(name: &str, holders: &[Holder]) -> Result<bool, Failure> {
    let holders: Vec<&str> = holders.iter().map(|holder| holder.id.as_str()).collect();
    let mut stderr = std::io::stderr().lock();
    // The question goes to stderr so that stdout keeps only the command's output.
    let asked = write!(
        stderr,
        "Free lock {name:?} held by {}? [y/N] ",
        holders.join(", ")
    )
    .and_then(|()| stderr.flush());
    asked.map_err(|error| Failure::Usage(format!("cannot ask for confirmation: {error}")))?;
    let mut answer = String::new();
    let stdin = std::io::stdin();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|error| Failure::Usage(format!("cannot read the answer: {error}")))?;
    if !stdin.is_terminal() {
        // An answer piped in is not echoed: end the question's line here.
        let _ = writeln!(stderr);
    }
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}
