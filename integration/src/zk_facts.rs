//! Reading facts from ZooKeeper for assertions: does a node exist, what
//! children does a path have.

use std::time::Duration;

use zookeeper_client as zk;

use crate::env::scale;
use crate::facts::{self, QUERY_TIMEOUT};
use crate::logs::ServerLogs;
use crate::runtime::{block_on_timeout, runtime};

/// Session timeout the fact client asks for.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// A ZooKeeper session used only to read facts, on the harness runtime.
///
/// One-shot queries panic on errors (with the server logs); `wait_*`
/// helpers retry errors until their deadline, so they ride out a leader
/// election or reconnect.
#[derive(Debug)]
pub struct ZkFacts {
    client: Option<zk::Client>,
    connect_string: String,
    logs: ServerLogs,
}

impl ZkFacts {
    /// Opens a session to `connect_string`; `logs` are quoted in panics.
    ///
    /// # Panics
    ///
    /// When no session is established within 10 s (scaled).
    pub fn connect(connect_string: &str, logs: ServerLogs) -> ZkFacts {
        let connector = zk::Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .with_connection_timeout(Duration::from_secs(2));
        let client = facts::connect(
            connect_string,
            "session with",
            connector.connect(connect_string),
            &logs,
        );
        ZkFacts {
            client: Some(client),
            connect_string: connect_string.to_owned(),
            logs,
        }
    }

    fn client(&self) -> &zk::Client {
        self.client
            .as_ref()
            .expect("ZkFacts client is only taken in Drop")
    }

    /// The id of the fact client's own session.
    pub fn session_id(&self) -> i64 {
        self.client().session_id().0
    }

    /// The quoted server logs.
    pub fn logs(&self) -> &ServerLogs {
        &self.logs
    }

    fn query<T>(
        &self,
        what: &str,
        future: impl std::future::Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, String> {
        facts::query(what, &self.connect_string, future)
    }

    fn or_panic<T>(&self, result: Result<T, String>) -> T {
        facts::or_panic(result, &self.logs)
    }

    fn try_exists(&self, path: &str) -> Result<bool, String> {
        self.query(&format!("exists {path}"), self.client().check_stat(path))
            .map(|stat| stat.is_some())
    }

    fn try_children(&self, path: &str) -> Result<Vec<String>, String> {
        match block_on_timeout(scale(QUERY_TIMEOUT), self.client().list_children(path)) {
            Some(Ok(mut children)) => {
                children.sort();
                Ok(children)
            }
            Some(Err(zk::Error::NoNode)) => Ok(Vec::new()),
            Some(Err(e)) => Err(format!(
                "children of {path} on {}: {e}",
                self.connect_string
            )),
            None => Err(format!(
                "children of {path} on {}: no answer",
                self.connect_string
            )),
        }
    }

    /// Whether `path` exists.
    ///
    /// # Panics
    ///
    /// When the query fails; the message quotes the server logs.
    pub fn exists(&self, path: &str) -> bool {
        self.or_panic(self.try_exists(path))
    }

    /// The data of `path`, `None` when it does not exist.
    ///
    /// # Panics
    ///
    /// When the query fails; the message quotes the server logs.
    pub fn data(&self, path: &str) -> Option<Vec<u8>> {
        match block_on_timeout(scale(QUERY_TIMEOUT), self.client().get_data(path)) {
            Some(Ok((data, _stat))) => Some(data),
            Some(Err(zk::Error::NoNode)) => None,
            Some(Err(e)) => panic!(
                "get {path} on {}: {e}\n{}",
                self.connect_string,
                self.logs.tail()
            ),
            None => panic!(
                "get {path} on {}: no answer\n{}",
                self.connect_string,
                self.logs.tail()
            ),
        }
    }

    /// Create the persistent node `path` with `data`, and its missing
    /// parents, as another program would.
    ///
    /// # Panics
    ///
    /// When the create fails; the message quotes the server logs.
    pub fn create(&self, path: &str, data: &[u8]) {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let parent = &path[..path.rfind('/').unwrap_or(0)];
        if !parent.is_empty() {
            let made = self.query(
                &format!("mkdir {parent}"),
                self.client().mkdir(parent, &options),
            );
            self.or_panic(made);
        }
        let created = self.query(
            &format!("create {path}"),
            self.client().create(path, data, &options),
        );
        self.or_panic(created.map(drop));
    }

    /// Delete `path` (any version), as an operator would by hand.
    ///
    /// # Panics
    ///
    /// When the delete fails; the message quotes the server logs.
    pub fn delete(&self, path: &str) {
        self.or_panic(self.query(&format!("delete {path}"), self.client().delete(path, None)))
    }

    /// The children of `path`, sorted; empty when `path` does not exist.
    ///
    /// # Panics
    ///
    /// When the query fails; the message quotes the server logs.
    pub fn children(&self, path: &str) -> Vec<String> {
        self.or_panic(self.try_children(path))
    }

    /// Every node at and below `path`, depth first, with its
    /// `ephemeralOwner` (0 for persistent and container nodes: the server
    /// shows clients no difference) and its data length; empty when `path`
    /// does not exist. A node deleted while the tree is read is left out.
    ///
    /// # Panics
    ///
    /// When a query fails; the message quotes the server logs.
    pub fn tree(&self, path: &str) -> Vec<(String, i64, i32)> {
        let mut nodes = Vec::new();
        let mut todo = vec![path.to_owned()];
        while let Some(node) = todo.pop() {
            let stat =
                self.or_panic(self.query(&format!("stat {node}"), self.client().check_stat(&node)));
            let Some(stat) = stat else {
                continue;
            };
            let base = if node == "/" { "" } else { node.as_str() };
            todo.extend(self.children(&node).iter().map(|c| format!("{base}/{c}")));
            nodes.push((node, stat.ephemeral_owner, stat.data_length));
        }
        nodes
    }

    /// The `ephemeralOwner` session of `path`; `None` when it does not
    /// exist, `Some(0)` for a persistent node.
    ///
    /// # Panics
    ///
    /// When the query fails; the message quotes the server logs.
    pub fn ephemeral_owner(&self, path: &str) -> Option<i64> {
        let stat =
            self.or_panic(self.query(&format!("stat {path}"), self.client().check_stat(path)));
        stat.map(|stat| stat.ephemeral_owner)
    }

    /// Waits until `path` exists.
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes the server logs.
    pub fn wait_exists(&self, path: &str, upper_bound: Duration) {
        self.wait_exists_is(path, true, upper_bound);
    }

    /// Waits until `path` is gone.
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes the server logs.
    pub fn wait_gone(&self, path: &str, upper_bound: Duration) {
        self.wait_exists_is(path, false, upper_bound);
    }

    fn wait_exists_is(&self, path: &str, wanted: bool, upper_bound: Duration) {
        let desc = format!(
            "{path} {} on {}",
            if wanted { "exists" } else { "is gone" },
            self.connect_string
        );
        facts::wait_true(
            &desc,
            upper_bound,
            || self.try_exists(path).map(|exists| exists == wanted),
            &self.logs,
        );
    }

    /// Waits until the sorted children of `path` satisfy `condition` and
    /// returns them.
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes the last children
    /// seen and the server logs.
    pub fn wait_children(
        &self,
        path: &str,
        desc: &str,
        upper_bound: Duration,
        condition: impl FnMut(&[String]) -> bool,
    ) -> Vec<String> {
        facts::wait_names(
            &format!("children of {path} {desc}"),
            upper_bound,
            || self.try_children(path),
            condition,
            &self.logs,
        )
    }
}

impl Drop for ZkFacts {
    fn drop(&mut self) {
        // zookeeper-client's Drop spawns the session close: it needs a runtime.
        let _entered = runtime().enter();
        drop(self.client.take());
    }
}
