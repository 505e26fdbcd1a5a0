//! [`ZkClient::kill_session`]: the server ends this client's session, as
//! its expiry would — for drills, demos and tests.

use recipes_core::{Error, Result};
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::error::from_zk;

impl ZkClient {
    /// Make the server end this client's session now, exactly as it would
    /// after a pause or partition longer than the session timeout, without
    /// this client taking part: a second connection resumes the session
    /// with its credentials and closes it (ZooKeeper's own way to test
    /// expiry, as Curator's `KillSession`). The session's nodes go at once;
    /// this client learns of it like any expired client, and its guards'
    /// fenced writes are refused from then on. For drills, demos and tests.
    ///
    /// # Errors
    ///
    /// Connection errors within the connect timeout.
    pub fn kill_session(&self) -> Result<()> {
        let client = self.clone();
        let (info, timeout, mut states) = self.call("read the session", async move {
            let session = client.live_session().await?;
            let zk = session.zk();
            Ok((zk.session().clone(), session.timeout(), zk.state_watcher()))
        })?;
        // Hold this client's runtime still meanwhile: it would reattach the
        // session at once, and the two connections would take it from each
        // other until one gives up.
        let (resume, held) = std::sync::mpsc::channel::<()>();
        let (holding, still) = std::sync::mpsc::channel::<()>();
        self.runtime().spawn(async move {
            let _ = holding.send(());
            let _ = held.recv_timeout(timeout);
        });
        if still.recv_timeout(timeout).is_err() {
            return Err(Error::Timeout {
                what: "kill the session: pause this client's runtime".into(),
                after: timeout,
            });
        }
        let killer = recipes_core::store::Runtime::new("recipes-zk-kill-session")?;
        let hosts = self.hosts().to_owned();
        let killed = killer.call("kill the session", timeout, async move {
            let other = zk::Client::connector()
                .with_session(info)
                .with_session_timeout(timeout)
                .connect(&hosts)
                .await
                .map_err(|e| from_zk(&format!("resume the session at {hosts}"), e))?;
            // Dropping a connected client sends CloseSession; its state
            // turns terminal when the server has answered.
            let mut states = other.state_watcher();
            drop(other);
            while !states.state().is_terminated() {
                states.changed().await;
            }
            Ok(())
        });
        killer.shutdown(timeout);
        drop(resume);
        killed?;
        // Return once this client has seen the server close its connection,
        // as a paused process would on waking: from here on a fenced write
        // is refused, never sent on a connection that is already gone
        // (that would be "outcome unknown").
        self.call("see the session end", async move {
            while states.state() == zk::SessionState::SyncConnected {
                states.changed().await;
            }
            Ok(())
        })
    }
}
