//! A hub whose listener never runs, for the schedule searches of the unit tests: waiters
//! join and leave its channels as on any hub (never live: it has no connection), and the
//! search plays the messages its listener would hear.

use std::sync::Arc;
use std::time::Duration;

use redis::IntoConnectionInfo;

use super::channels::{Interest, Mode};
use super::hub::{HubSettings, Shared};
use super::transport::connection::Endpoint;
use super::Subscription;
use crate::error::Result;

pub(crate) struct OfflineHub(Arc<Shared>);

impl OfflineHub {
    pub(crate) fn new() -> Self {
        let info = crate::client::sync::searched::NO_SERVER
            .into_connection_info()
            .expect("an address");
        let endpoint = Endpoint::from_info(&info, None, None, None).expect("an endpoint");
        let settings = HubSettings {
            mode: Mode::Plain,
            notice_channel: "notices".to_owned(),
            notice_handler: Arc::new(|_| {}),
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
        };
        OfflineHub(Arc::new(Shared::new(endpoint, None, &settings, None, None)))
    }

    /// Joins the waiters for `lock` on `channel`.
    pub(crate) fn subscribe(&self, channel: &str, lock: &str) -> Result<Subscription> {
        let member = self.0.join(channel, &Interest::lock(Some(lock)))?;
        Ok(Subscription {
            member,
            route: None,
        })
    }

    /// A message on `channel`, heard and handed on as the listener does.
    pub(crate) fn heard(&self, channel: &str, payload: &[u8]) {
        self.0.state.lock().released(channel, payload);
    }

    /// How many channels have waiters (or commands due).
    pub(crate) fn channel_count(&self) -> usize {
        self.0.channel_count()
    }
}
