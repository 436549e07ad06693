//! `doctor`: the settings of the deployment's masters that put locks at risk, each with what
//! it risks and how to fix it, as the library's server check reads them (through a manager
//! on the deployment, built without the check and without pub/sub).

use std::time::Duration;

use redlease::{Finding, ServerCheck};
use serde::Serialize;

use crate::connection::Failure;
use crate::deployment::Deployment;

/// How long an acknowledgement is waited for, in the manager the check is read through: it
/// never writes, so only the count matters.
const ACK_TIMEOUT: Duration = Duration::from_secs(1);

/// What the check found.
#[derive(Serialize)]
pub struct Checkup {
    pub findings: Vec<Found>,
}

/// One finding, in words.
#[derive(Serialize)]
pub struct Found {
    pub server: String,
    pub kind: &'static str,
    pub found: String,
    pub risk: &'static str,
    pub fix: &'static str,
}

/// Reads the deployment's settings; `replicas`: the acknowledgements the applications' managers
/// ask for (`replica_acks` or `aof_acks`), checked against the replicas connected.
pub fn doctor(deployment: &Deployment, replicas: Option<u32>) -> Result<Checkup, Failure> {
    let mut builder = deployment
        .builder()
        .server_check(ServerCheck::Off)
        .without_pubsub();
    builder = match replicas {
        Some(replicas) => builder.replica_acks(replicas, ACK_TIMEOUT),
        None => builder.without_replica_acks(),
    };
    let manager = builder.build()?;
    let findings = manager.check_server()?;
    Ok(Checkup {
        findings: findings.iter().map(found).collect(),
    })
}

fn found(finding: &Finding) -> Found {
    Found {
        server: finding.server().to_owned(),
        kind: kind(finding),
        found: finding.description(),
        risk: finding.risk(),
        fix: finding.fix(),
    }
}

/// The finding's kind, for JSON.
fn kind(finding: &Finding) -> &'static str {
    match finding {
        Finding::Eviction { .. } => "eviction",
        Finding::TooFewReplicas { .. } => "too-few-replicas",
        Finding::SlotsUncovered { .. } => "slots-uncovered",
        Finding::Unreadable { .. } => "unreadable",
        _ => "other",
    }
}
