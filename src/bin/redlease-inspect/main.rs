//! `redlease-inspect`: the operator's view of the locks, semaphores and latches that redlease
//! (or Redisson) keeps on a Redis deployment: one server (TLS and ACL users included), the
//! master Redis Sentinel names, or a Redis Cluster.
//!
//! `inspect NAME` shows a primitive's holders, lease, fencing token and waiters; `watch NAME`
//! follows it as it changes; `list PATTERN` finds held locks (on every master of a cluster);
//! `break-lock NAME` frees one; `top` shows the most waited-for locks and the processes
//! waiting on each other; `doctor` checks the settings that put locks at risk. Plain
//! text, or one JSON object per command (per change, for `watch`) with `--json`. Exit codes:
//! 0 done, 1 nothing found, not confirmed, or (`doctor`) something to fix, 2 bad arguments
//! or the server could not be asked; errors go to stderr.
//!
//! Modules: `cli` (arguments), `deployment` (which servers, with which TLS files),
//! `connection` (the bounded connection, failures and exit codes), `probe` (inspect),
//! `watch`, `scan` (list), `top`, `break_lock`, `doctor`, `render` (text output).

mod break_lock;
mod cli;
mod connection;
mod deployment;
mod doctor;
mod probe;
mod render;
mod scan;
mod top;
mod watch;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use serde::Serialize;

use cli::{Cli, Command};
use connection::Failure;
use deployment::Deployment;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok((output, code)) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`| head`) is no failure of the command.
            let _ = stdout.write_all(output.as_bytes());
            let _ = stdout.flush();
            code
        }
        Err(failure) => {
            eprintln!("redlease-inspect: {}", failure.message());
            ExitCode::from(failure.exit_code())
        }
    }
}

/// Runs the command and answers what it prints, and its exit code.
fn run(cli: &Cli) -> Result<(String, ExitCode), Failure> {
    let deployment = Deployment::from_cli(cli)?;
    let printed = match &cli.command {
        Command::Inspect { name } => {
            let mut redis = deployment.connect_for(name)?;
            let report = probe::probe(&mut redis, name)?;
            output(cli.json, &report, render::report)
        }
        Command::Watch { name, interval } => {
            let mut redis = deployment.connect_for(name)?;
            let mut stdout = std::io::stdout().lock();
            watch::watch(&mut redis, name, *interval, cli.json, &mut stdout)?;
            Ok(String::new())
        }
        Command::List {
            pattern,
            limit,
            scan_count,
        } => {
            let mut masters = deployment.connect_masters()?;
            let listing = scan::list(&mut masters, pattern, *limit, *scan_count)?;
            output(cli.json, &listing, render::listing)
        }
        Command::BreakLock { name, yes } => {
            let mut redis = deployment.connect_for(name)?;
            let settings = break_lock::Settings {
                deployment: &deployment,
                yes: *yes,
            };
            let freed = break_lock::break_lock(&mut redis, name, &settings)?;
            output(cli.json, &freed, render::freed)
        }
        Command::Top {
            show,
            limit,
            scan_count,
        } => {
            let mut masters = deployment.connect_masters()?;
            let show = usize::try_from(*show).unwrap_or(usize::MAX);
            let top = top::top(&mut masters, *limit, *scan_count, show)?;
            output(cli.json, &top, render::top)
        }
        Command::Doctor { replicas } => return checkup(cli, &deployment, *replicas),
    }?;
    Ok((printed, ExitCode::SUCCESS))
}

/// Runs `doctor`: exits with 1 when it found something to fix.
fn checkup(
    cli: &Cli,
    deployment: &Deployment,
    replicas: Option<u32>,
) -> Result<(String, ExitCode), Failure> {
    let checkup = doctor::doctor(deployment, replicas)?;
    let code = match checkup.findings.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    };
    Ok((output(cli.json, &checkup, render::checkup)?, code))
}

/// `value` as one line of JSON, or as text.
fn output<T: Serialize>(json: bool, value: &T, text: fn(&T) -> String) -> Result<String, Failure> {
    if !json {
        return Ok(text(value));
    }
    let mut line = serde_json::to_string(value)
        .map_err(|error| Failure::Usage(format!("cannot write JSON: {error}")))?;
    line.push('\n');
    Ok(line)
}
