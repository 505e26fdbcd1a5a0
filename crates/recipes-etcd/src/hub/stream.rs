//! The hub's task: one watch stream, its watches created, cancelled and
//! resumed, and what it hears handed to the interests.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponse};
use recipes_core::store::Backoff;

use super::{Name, Shared, State};
use crate::rpc::from_etcd;
use crate::session::Etcd;

/// Run the client's watch stream for as long as the client's runtime:
/// open it once a name needs a watch, re-open it when it breaks.
pub(super) async fn run(etcd: Etcd, shared: Arc<Shared>, timeout: Duration) {
    let mut backoff = Backoff::RECOVER;
    let mut generation = 0u64;
    loop {
        generation += 1;
        let (prefix, options) = loop {
            let notified = shared.wake.notified();
            if let Some(first) = shared.state.lock().next_create(generation) {
                break first;
            }
            notified.await;
        };
        let mut etcd = etcd.clone();
        let opened = tokio::time::timeout(timeout, etcd.watch(prefix.as_str(), Some(options)));
        let (mut sender, mut replies) = match opened.await {
            Ok(Ok(stream)) => stream.split(),
            failed => {
                let why = match failed {
                    Ok(Err(e)) => from_etcd("watch", e).to_string(),
                    _ => format!("no reply within {timeout:?}"),
                };
                log::debug!("open the watch stream: {why}");
                shared.state.lock().restart();
                backoff.pause().await;
                continue;
            }
        };
        let broke = loop {
            let notified = shared.wake.notified();
            if let Err(e) = send(&shared, &mut sender, generation).await {
                break e;
            }
            tokio::select! {
                () = notified => {}
                reply = replies.message() => match reply {
                    Ok(Some(reply)) => {
                        backoff.reset();
                        shared.state.lock().on_reply(&reply);
                    }
                    Ok(None) => break "the stream ended".to_owned(),
                    Err(e) => break from_etcd("watch", e).to_string(),
                },
            }
        };
        log::debug!("the watch stream broke ({broke}); re-opening it");
        shared.state.lock().restart();
        backoff.pause().await;
    }
}

/// Send what the state has queued: creates, then cancels.
async fn send(
    shared: &Shared,
    sender: &mut WatchRequestSender,
    generation: u64,
) -> Result<(), String> {
    loop {
        let next = shared.state.lock().next_create(generation);
        let Some((prefix, options)) = next else { break };
        sender
            .watch(prefix, Some(options))
            .await
            .map_err(|e| e.to_string())?;
    }
    loop {
        let next = shared.state.lock().to_cancel.pop();
        let Some(id) = next else { break };
        sender.cancel(id).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

impl State {
    /// The next watch to create on stream `generation`, marked sent.
    fn next_create(&mut self, generation: u64) -> Option<(String, WatchOptions)> {
        while let Some(prefix) = self.to_create.pop() {
            let Some(name) = self.names.get_mut(&prefix) else {
                continue;
            };
            if name.sent_on == Some(generation) {
                continue;
            }
            name.sent_on = Some(generation);
            name.cancelled = None;
            return Some((prefix, options(name)));
        }
        None
    }

    /// The stream broke: every watch asked for is created again on the
    /// next one, each resumed where it stopped (cancels are moot). A name
    /// no interest has asked a watch for yet waits for its first
    /// [`ours`](super::Interest::ours).
    ///
    /// A resumed watch vouches only for deletions *after* the revision it
    /// resumes at: etcd 3.4.23 (etcd-io/etcd#18089) does not send a
    /// watch started at the revision a compaction named the deletion at
    /// exactly that revision, nor says it compacted anything. So every
    /// interest whose last read is older reads again (a held key: one
    /// read per stream break).
    fn restart(&mut self) {
        self.to_cancel.clear();
        self.to_create.clear();
        for (prefix, name) in &mut self.names {
            name.sent_on = None;
            if name.covered_after != i64::MAX {
                name.covered_after = name.covered_after.max(name.next_rev);
                self.to_create.push(prefix.clone());
                recheck(name);
            }
        }
    }

    /// What the server said about one watch.
    fn on_reply(&mut self, reply: &WatchResponse) {
        let Some(prefix) = self.ids.get(&reply.watch_id()).cloned() else {
            return;
        };
        let header = reply.header().map(|h| h.revision());
        let compacted = reply.compact_revision();
        if compacted > 0 || reply.canceled() {
            self.ids.remove(&reply.watch_id());
            let id = self.next_id;
            self.next_id += 1;
            let name = self.names.get_mut(&prefix).expect("ids name names");
            name.id = id;
            if compacted > 0 {
                // Deletions up to `compacted` may be lost (before it:
                // compacted; at it: etcd#18089, see `restart`): no
                // interest that read before it may trust the watch; resume
                // from there.
                log::debug!("watch on {prefix}: history compacted up to {compacted}");
                name.covered_after = name.covered_after.max(compacted);
                name.next_rev = name.next_rev.max(compacted);
                name.sent_on = None;
                self.to_create.push(prefix.clone());
            } else {
                // Created again when an interest next asks for it.
                name.cancelled = Some(reply.cancel_reason().to_owned());
            }
            self.ids.insert(id, prefix.clone());
            recheck(name);
            return;
        }
        let name = self.names.get_mut(&prefix).expect("ids name names");
        if reply.created() {
            // Asked for from `next_rev`. A write since (the store is at
            // `header`) makes etcd serve the watch from its unsynced loop,
            // up to 100 ms late, until it catches up: what it would have
            // heard meanwhile, the interests read instead. With none (the
            // member still at `next_rev - 1`, exactly), no revision the
            // watch starts at exists there yet, so none was compacted
            // (etcd#18089, see `restart`), and the watch hears every
            // deletion from `next_rev` on as the member applies it: it
            // vouches for reads from `next_rev - 1` on, as a first watch
            // does for its read. Without this, every interest of a quiet
            // store would read again and again after a stream break until
            // someone wrote (measured: ~700 reads a second). Never lower:
            // a member further behind (a lagging follower, a store
            // restored from an older backup) would vouch for reads whose
            // deletions came before the watch's start, which it never
            // sends.
            match header {
                Some(rev) if rev >= name.next_rev => recheck(name),
                Some(rev) if rev + 1 == name.next_rev && name.covered_after != i64::MAX => {
                    name.covered_after = name.covered_after.min(rev);
                }
                _ => {}
            }
            return;
        }
        if reply.events().is_empty() {
            // A progress notification: every deletion up to `rev` was sent.
            if let Some(rev) = header {
                name.next_rev = name.next_rev.max(rev + 1);
            }
            return;
        }
        for event in reply.events() {
            let Some(kv) = event.kv() else { continue };
            let rev = kv.mod_revision();
            name.next_rev = name.next_rev.max(rev + 1);
            if event.event_type() != EventType::Delete {
                continue;
            }
            for slot in name.interests.values() {
                let mut st = slot.state.lock();
                if st.hear(kv.key(), rev) {
                    st.woken = true;
                    drop(st);
                    slot.notify.notify_one();
                }
            }
        }
    }
}

/// The watch of `name` changed: every interest looks again.
fn recheck(name: &Name) {
    for slot in name.interests.values() {
        slot.state.lock().recheck = true;
        slot.notify.notify_one();
    }
}

/// The create request of `name`'s watch: deletions under its prefix, from
/// the first revision not yet heard.
fn options(name: &Name) -> WatchOptions {
    WatchOptions::new()
        .with_prefix()
        .with_filters([WatchFilterType::NoPut])
        .with_progress_notify()
        .with_watch_id(name.id)
        .with_start_revision(name.next_rev)
}
