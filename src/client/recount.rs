//! The recount thread of a manager whose writes wait for the replicas connected now
//! ([`connected_replica_acks`](crate::LockManagerBuilder::connected_replica_acks), the
//! default): `redlease-replicas` reads each master's count of replicas in sync when it is due
//! (see `crate::client::topology::replicas`), looking every [`LOOK_EVERY`]. The reads are
//! its own, so that a master that does not answer holds up no write, renewal or release: they
//! only ever take the count last read.
//!
//! The client owns the thread and stops it ([`Recount::stop`]). It may touch the router's
//! pools; nothing else.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::Mutex;

use crate::client::call::replication::AckSetting;
use crate::client::call::route::Router;
use crate::error::{Error, Result};

/// How often the thread looks for counts due: a `WAIT` that answered another count has its
/// master read again within this.
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(100);

pub(crate) struct Recount {
    /// Dropped to stop the thread (the only sender: its receiver then disconnects).
    stop: Mutex<Option<Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Recount {
    /// Starts the thread when writes wait for the replicas connected now (`setting`).
    pub(crate) fn start_for(
        setting: Option<&AckSetting>,
        router: &Arc<Router>,
    ) -> Result<Option<Recount>> {
        match setting {
            Some(AckSetting::Connected { .. }) => Recount::start(Arc::clone(router)).map(Some),
            _ => Ok(None),
        }
    }

    /// Starts the thread, which reads through `router`'s master pools.
    pub(crate) fn start(router: Arc<Router>) -> Result<Recount> {
        let (sender, receiver) = crossbeam_channel::bounded(0);
        let thread = std::thread::Builder::new()
            .name("redlease-replicas".into())
            .spawn(move || run(&router, &receiver))
            .map_err(Error::ThreadSpawn)?;
        Ok(Recount {
            stop: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stops the thread and joins it (after the read under way, if any).
    pub(crate) fn stop(&self) {
        self.stop.lock().take();
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Recount {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread: every [`LOOK_EVERY`], reads the counts due, one master after another; ends
/// when `stop` disconnects (between two reads, so that a shutdown waits for one at most).
fn run(router: &Router, stop: &Receiver<()>) {
    loop {
        match stop.recv_timeout(LOOK_EVERY) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        for pool in router.master_pools() {
            if matches!(stop.try_recv(), Err(TryRecvError::Disconnected)) {
                return;
            }
            pool.recount_replicas_if_due();
        }
    }
}
