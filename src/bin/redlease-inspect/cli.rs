//! The command line: commands, their arguments and the options every command shares.

use std::time::Duration;

use clap::{Parser, Subcommand};

/// Shows who holds the redlease (or Redisson) locks, semaphores and latches on a Redis
/// deployment (a server, Sentinel's master, or a cluster), for how long, and who waits for
/// them; follows one as it changes; frees a lock by force.
#[derive(Debug, Parser)]
#[command(name = "redlease-inspect", version)]
pub struct Cli {
    /// The Redis server: redis://[user:password@]host:port[/db], rediss://... for TLS, or
    /// redis+unix:///path. With --cluster, a seed node; give it again for more seeds.
    // Plain text for `--help`, which shows doc comments as they are: no link meant.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(
        long,
        global = true,
        env = "REDLEASE_URL",
        // The URL may carry a password: help does not print the variable's value.
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379/"
    )]
    pub url: Vec<String>,

    /// Redis Cluster: --url names seed nodes; `inspect`, `watch` and `break-lock` go to
    /// the master of the name's slot, `list` scans every master.
    #[arg(long, global = true, conflicts_with = "sentinel")]
    pub cluster: bool,

    /// Redis Sentinel: a sentinel's URL (give it again for more); the master they name for
    /// --master is asked, and --url is not used.
    #[arg(long, global = true, value_name = "URL", requires = "master")]
    pub sentinel: Vec<String>,

    /// With --sentinel: the master's name as the sentinels know it.
    #[arg(long, global = true, value_name = "NAME")]
    pub master: Option<String>,

    /// With --sentinel: the master's ACL user (the sentinels' own go in their URLs).
    #[arg(long, global = true, value_name = "USER")]
    pub master_user: Option<String>,

    /// With --sentinel: the master's password.
    #[arg(
        long,
        global = true,
        env = "REDLEASE_MASTER_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD"
    )]
    pub master_password: Option<String>,

    /// TLS (rediss:// URLs): the CA certificate (PEM) to check the server's certificate
    /// with, instead of the system's roots.
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,

    /// TLS: the client certificate (PEM), for servers that require one; with --tls-key.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// TLS: the client certificate's private key (PEM); with --tls-cert.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// TLS: do not check the server's certificate. For development only.
    #[arg(long, global = true)]
    pub tls_insecure: bool,

    /// Print one JSON object instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// How long connecting (name lookup included) may take, in seconds.
    #[arg(long, global = true, default_value = "3", value_name = "SECONDS", value_parser = seconds)]
    pub connect_timeout: Duration,

    /// How long each answer of the server may take, in seconds.
    #[arg(long, global = true, default_value = "3", value_name = "SECONDS", value_parser = seconds)]
    pub response_timeout: Duration,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the primitive on NAME: its kind, holders, lease, fencing token and waiters.
    Inspect {
        /// The name of the lock, semaphore or latch (its Redis key).
        name: String,
    },
    /// List the held locks whose names match PATTERN (a Redis glob: * ? [..]).
    List {
        /// The glob the names must match, as for SCAN MATCH; quote it in the shell.
        pattern: String,
        /// Stop after this many locks.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
        limit: u64,
        /// How many keys each SCAN call looks at (its COUNT hint).
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
        scan_count: u64,
    },
    /// Follow the primitive on NAME: print it again whenever its holders, queue or waiters
    /// change (with --json, one object per change), until interrupted.
    Watch {
        /// The name of the lock, semaphore or latch (its Redis key).
        name: String,
        /// How often to look, in seconds (each look is one bounded round of calls).
        #[arg(long, default_value = "0.2", value_name = "SECONDS", value_parser = seconds)]
        interval: Duration,
    },
    /// Show the held locks with the most waiters first, on every master, and the processes
    /// that wait on each other's fair locks in a cycle.
    Top {
        /// How many locks to show.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
        show: u64,
        /// Stop scanning after this many held locks.
        #[arg(long, default_value_t = 10000, value_parser = clap::value_parser!(u64).range(1..))]
        limit: u64,
        /// How many keys each SCAN call looks at (its COUNT hint).
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
        scan_count: u64,
    },
    /// Check the settings of the deployment's masters that put locks at risk (eviction,
    /// replicas, a cluster's slots); each finding says what it risks and how to fix it.
    /// Exits with 1 when it found something.
    Doctor {
        /// The replica acknowledgements your managers ask for (replica_acks or aof_acks):
        /// checked against the replicas connected to each master.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        replicas: Option<u32>,
    },
    /// Free the lock on NAME whoever holds it; its holders hear that they lost it.
    BreakLock {
        /// The name of the lock (a lock, fair lock or read-write lock).
        name: String,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// A positive number of seconds, fractions allowed ("0.5").
fn seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(seconds > 0.0 && seconds <= 3600.0) {
        return Err(format!("{text} s is not within (0, 3600] seconds"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn timeouts_are_positive_seconds() {
        assert_eq!(seconds("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(seconds("3"), Ok(Duration::from_secs(3)));
        for bad in ["0", "-1", "x", "NaN", "inf", "99999"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }
}
