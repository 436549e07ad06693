//! `redlease-inspect`: the operator's view of the locks, semaphores and latches that redlease
//! (or Redisson) keeps on one Redis server.
//!
//! `inspect NAME` shows a primitive's holders, lease, fencing token and waiters; `list
//! PATTERN` finds held locks; `force-unlock NAME` frees one. Plain text, or one JSON object
//! per command with `--json`. Exit codes: 0 done, 1 nothing found or not confirmed, 2 bad
//! arguments or the server could not be asked; errors go to stderr.
//!
//! Modules: `cli` (arguments), `connection` (the bounded connection, failures and exit
//! codes), `layout` (key and channel names), `probe` (inspect), `scan` (list), `force`
//! (force-unlock), `render` (text output).

mod cli;
mod connection;
mod force;
mod probe;
mod render;
mod scan;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use serde::Serialize;

use cli::{Cli, Command};
use connection::Failure;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(output) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`| head`) is no failure of the command.
            let _ = stdout.write_all(output.as_bytes());
            let _ = stdout.flush();
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("redlease-inspect: {}", failure.message());
            ExitCode::from(failure.exit_code())
        }
    }
}

/// Runs the command and answers what it prints.
fn run(cli: &Cli) -> Result<String, Failure> {
    let mut redis = connection::connect(&cli.url, cli.connect_timeout, cli.response_timeout)?;
    match &cli.command {
        Command::Inspect { name } => {
            let report = probe::probe(&mut redis, name)?;
            output(cli.json, &report, render::report)
        }
        Command::List {
            pattern,
            limit,
            scan_count,
        } => {
            let listing = scan::list(&mut redis, pattern, *limit, *scan_count)?;
            output(cli.json, &listing, render::listing)
        }
        Command::ForceUnlock { name, yes } => {
            let settings = force::Settings {
                url: &cli.url,
                connect_timeout: cli.connect_timeout,
                response_timeout: cli.response_timeout,
                yes: *yes,
            };
            let freed = force::force_unlock(&mut redis, name, &settings)?;
            output(cli.json, &freed, render::freed)
        }
    }
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
