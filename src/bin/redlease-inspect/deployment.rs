//! Where the tool's calls go: one server, the master the sentinels name, or the masters of a
//! Redis Cluster, with the TLS files given; and a manager on the same deployment for a force
//! release. Every connection is made through `connection::connect`, bounded in time.

use std::time::Duration;

use redlease::redis::{
    self, Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsCertificates, Value,
};
use redlease::{LockManager, LockManagerBuilder};

use crate::cli::Cli;
use crate::connection::{self, Failure};

/// The deployment the command line names.
pub struct Deployment {
    shape: Shape,
    tls: TlsFiles,
    connect_timeout: Duration,
    response_timeout: Duration,
}

enum Shape {
    Single(String),
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        user: Option<String>,
        password: Option<String>,
    },
    Cluster(Vec<String>),
}

/// The TLS options, read from their files.
#[derive(Default)]
struct TlsFiles {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
    insecure: bool,
}

impl Deployment {
    pub fn from_cli(cli: &Cli) -> Result<Self, Failure> {
        // redis-rs reads `#insecure` at a rediss:// URL's end as --tls-insecure; the library,
        // which a force release goes through, wants the option: take it as one.
        let mut insecure = cli.tls_insecure;
        let mut own = |urls: &[String]| -> Vec<String> {
            urls.iter()
                .map(|url| match url.strip_suffix("#insecure") {
                    Some(url) => {
                        insecure = true;
                        url.to_owned()
                    }
                    None => url.clone(),
                })
                .collect()
        };
        let (urls, sentinels) = (own(&cli.url), own(&cli.sentinel));
        let shape = if !sentinels.is_empty() {
            Shape::Sentinel {
                sentinels,
                master: cli.master.clone().unwrap_or_default(),
                user: cli.master_user.clone(),
                password: cli.master_password.clone(),
            }
        } else if cli.cluster {
            Shape::Cluster(urls)
        } else {
            match urls.as_slice() {
                [url] => Shape::Single(url.clone()),
                _ => return Err(usage("give one --url, or seed nodes with --cluster")),
            }
        };
        let read = |path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|error| usage(&format!("cannot read {}: {error}", path.display())))
        };
        let tls = TlsFiles {
            ca: cli.tls_ca.as_deref().map(read).transpose()?,
            client: match (&cli.tls_cert, &cli.tls_key) {
                (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
                _ => None,
            },
            insecure,
        };
        Ok(Deployment {
            shape,
            tls,
            connect_timeout: cli.connect_timeout,
            response_timeout: cli.response_timeout,
        })
    }

    /// A connection to the master that keeps `name` (and every key of it: they share its
    /// slot).
    pub fn connect_for(&self, name: &str) -> Result<redis::Connection, Failure> {
        match &self.shape {
            Shape::Single(url) => self.connect(info_of(url)?),
            Shape::Sentinel { .. } => self.connect(self.sentinel_master()?),
            Shape::Cluster(seeds) => {
                let (seed, mut connection) = self.connect_seed(seeds)?;
                let slot: u16 = redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(name)
                    .query(&mut connection)?;
                let masters = cluster_masters(&mut connection)?;
                let (_, host, port) = masters
                    .into_iter()
                    .find(|(slots, ..)| slots.iter().any(|range| range.contains(&slot)))
                    .ok_or_else(|| usage(&format!("no master serves slot {slot} now")))?;
                self.connect(node_info(&seed, host, port))
            }
        }
    }

    /// A connection to every master: the one, or each of a cluster's.
    pub fn connect_masters(&self) -> Result<Vec<redis::Connection>, Failure> {
        match &self.shape {
            Shape::Cluster(seeds) => {
                let (seed, mut connection) = self.connect_seed(seeds)?;
                cluster_masters(&mut connection)?
                    .into_iter()
                    .map(|(_, host, port)| self.connect(node_info(&seed, host, port)))
                    .collect()
            }
            _ => Ok(vec![self.connect_for("")?]),
        }
    }

    /// A manager on the same deployment, with the same TLS options and timeouts. Its writes
    /// (a lock freed by force) wait for no replica: a failover that undoes one leaves the lock
    /// held, as before, and the tool's user needs neither `WAIT` nor a thread counting them.
    pub fn manager(&self) -> Result<LockManager, Failure> {
        Ok(self.builder().without_replica_acks().build()?)
    }

    /// The builder of a manager on the deployment, with the tool's timeouts and TLS files.
    pub fn builder(&self) -> LockManagerBuilder {
        let builder = match &self.shape {
            Shape::Single(url) => LockManager::builder(url.as_str()),
            Shape::Sentinel {
                sentinels,
                master,
                user,
                password,
            } => {
                let builder =
                    LockManager::builder_sentinel(sentinels.iter().map(String::as_str), master);
                match password {
                    Some(password) => builder.master_auth(user.as_deref(), password),
                    None => builder,
                }
            }
            Shape::Cluster(seeds) => LockManager::builder_cluster(seeds.iter().map(String::as_str)),
        };
        self.with_tls(builder)
            .connect_timeout(self.connect_timeout)
            .response_timeout(self.response_timeout)
    }

    fn with_tls(&self, mut builder: LockManagerBuilder) -> LockManagerBuilder {
        if let Some(ca) = &self.tls.ca {
            builder = builder.tls_ca_certificate(ca);
        }
        if let Some((cert, key)) = &self.tls.client {
            builder = builder.tls_client_certificate(cert, key);
        }
        if self.tls.insecure {
            builder = builder.tls_danger_accept_invalid_certificates();
        }
        builder
    }

    /// Connects to the first of `seeds` that answers, and answers its settings too.
    fn connect_seed(
        &self,
        seeds: &[String],
    ) -> Result<(ConnectionInfo, redis::Connection), Failure> {
        let mut last = None;
        for seed in seeds {
            let info = info_of(seed)?;
            match self.connect(info.clone()) {
                Ok(connection) => return Ok((info, connection)),
                Err(failure) => last = Some(failure),
            }
        }
        Err(last.unwrap_or_else(|| usage("no seed node given")))
    }

    /// The master the sentinels name now, with the master's credentials.
    fn sentinel_master(&self) -> Result<ConnectionInfo, Failure> {
        let Shape::Sentinel {
            sentinels,
            master,
            user,
            password,
        } = &self.shape
        else {
            unreachable!("asked only in sentinel mode");
        };
        let mut last = None;
        for sentinel in sentinels {
            let info = info_of(sentinel)?;
            let asked = self.connect(info.clone()).and_then(|mut connection| {
                let address: Option<(String, u16)> = redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(master)
                    .query(&mut connection)?;
                Ok(address)
            });
            match asked {
                Ok(Some((host, port))) => {
                    let mut settings = redis::RedisConnectionInfo::default();
                    if let Some(user) = user {
                        settings = settings.set_username(user);
                    }
                    if let Some(password) = password {
                        settings = settings.set_password(password);
                    }
                    return Ok(node_info(&info, host, port).set_redis_settings(settings));
                }
                Ok(None) => last = Some(usage(&format!("the sentinels know no master {master:?}"))),
                Err(failure) => last = Some(failure),
            }
        }
        Err(last.unwrap_or_else(|| usage("no sentinel given")))
    }

    fn connect(&self, info: ConnectionInfo) -> Result<redis::Connection, Failure> {
        let client = self.client(info)?;
        connection::connect(client, self.connect_timeout, self.response_timeout)
    }

    /// A client of `info` with the TLS options, for a TLS address.
    fn client(&self, info: ConnectionInfo) -> Result<Client, Failure> {
        let info = match info.addr().clone() {
            ConnectionAddr::TcpTls { host, port, .. } if self.tls.insecure => {
                info.set_addr(ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: true,
                    tls_params: None,
                })
            }
            _ => info,
        };
        let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        let client = if tls && (self.tls.ca.is_some() || self.tls.client.is_some()) {
            let certificates =
                TlsCertificates {
                    client_tls: self.tls.client.as_ref().map(|(cert, key)| {
                        redis::ClientTlsConfig {
                            client_cert: cert.clone(),
                            client_key: key.clone(),
                        }
                    }),
                    root_cert: self.tls.ca.clone(),
                };
            Client::build_with_tls(info, certificates)
        } else {
            Client::open(info)
        };
        client.map_err(|error| usage(&format!("bad connection settings: {error}")))
    }
}

fn usage(message: &str) -> Failure {
    Failure::Usage(message.to_owned())
}

fn info_of(url: &str) -> Result<ConnectionInfo, Failure> {
    url.into_connection_info()
        .map_err(|error| usage(&format!("bad URL: {error}")))
}

/// `like`'s settings (credentials, TLS) for the node at `host`:`port` (`like`'s host when
/// `host` is empty: a cluster that announces no address for a node means its own).
fn node_info(like: &ConnectionInfo, host: String, port: u16) -> ConnectionInfo {
    let host = match (host.is_empty(), like.addr()) {
        (true, ConnectionAddr::Tcp(own, _) | ConnectionAddr::TcpTls { host: own, .. }) => {
            own.clone()
        }
        _ => host,
    };
    let addr = match like.addr() {
        ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: None,
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    like.clone().set_addr(addr)
}

/// A cluster's masters as `CLUSTER SLOTS` answers them: their slot ranges and address.
type Master = (Vec<std::ops::RangeInclusive<u16>>, String, u16);

fn cluster_masters(connection: &mut redis::Connection) -> Result<Vec<Master>, Failure> {
    let ranges: Vec<Value> = redis::cmd("CLUSTER").arg("SLOTS").query(connection)?;
    let mut masters: Vec<Master> = Vec::new();
    for range in ranges {
        let parsed: Option<(u16, u16, String, u16)> = (|| {
            let Value::Array(parts) = range else {
                return None;
            };
            let number = |value: &Value| match value {
                Value::Int(number) => u16::try_from(*number).ok(),
                _ => None,
            };
            let (start, end) = (number(parts.first()?)?, number(parts.get(1)?)?);
            let Value::Array(node) = parts.get(2)? else {
                return None;
            };
            // No address known ("?", empty, or nil with `cluster-preferred-endpoint-type
            // unknown-endpoint`): the node is reached at the seed's host.
            let host: Option<String> = redis::from_redis_value_ref(node.first()?).ok()?;
            let host = host.filter(|host| host != "?").unwrap_or_default();
            Some((start, end, host, number(node.get(1)?)?))
        })();
        let Some((start, end, host, port)) = parsed else {
            return Err(usage("CLUSTER SLOTS answered something unexpected"));
        };
        match masters
            .iter_mut()
            .find(|(_, h, p)| *h == host && *p == port)
        {
            Some((slots, ..)) => slots.push(start..=end),
            None => masters.push((vec![start..=end], host, port)),
        }
    }
    Ok(masters)
}
