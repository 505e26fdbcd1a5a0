//! The slot engine over an in-memory store whose takes are granted by
//! "server" tasks that outlive the caller's future, as a PostgreSQL lock
//! statement does once sent.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::{take, SlotDriver};
use crate::error::{Error, Result};
use crate::loss::{LossReason, LossSignal, LossTrigger};

#[derive(Debug, Default)]
struct Store {
    /// Each slot's owner: an epoch id.
    owners: Mutex<Vec<Option<u64>>>,
    fence: AtomicU64,
    freed: Notify,
    /// How long the server takes to grant a free slot.
    grant_delay: Mutex<Duration>,
    /// The next confirm says the holding is gone.
    lose_next_confirm: AtomicBool,
    /// How long the next confirm takes (a previous holder's deadline
    /// waited out).
    next_confirm_waits: Mutex<Duration>,
    /// Told when a confirm begins such a wait.
    confirm_waiting: Notify,
    given_back: AtomicU64,
}

impl Store {
    fn new(slots: usize) -> Arc<Store> {
        let s = Store::default();
        *s.owners.lock() = vec![None; slots];
        Arc::new(s)
    }

    fn holders(&self) -> usize {
        self.owners.lock().iter().flatten().count()
    }

    fn release(&self, epoch: u64, slot: usize) {
        let mut owners = self.owners.lock();
        if owners[slot] == Some(epoch) {
            owners[slot] = None;
            self.freed.notify_waiters();
        }
    }
}

struct Epoch {
    id: u64,
    trigger: LossTrigger,
}

#[derive(Debug)]
struct Ticket {
    store: Arc<Store>,
    epoch: u64,
    slot: usize,
    /// The server's answer to the take in flight, if one was sent.
    pending: Option<oneshot::Receiver<bool>>,
}

/// Epoch ids, unique across drivers (the store's owners).
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

struct Driver {
    store: Arc<Store>,
    slots: usize,
    /// Every epoch this driver opened, in order.
    epochs: Mutex<Vec<(u64, LossTrigger)>>,
}

impl Driver {
    fn new(store: &Arc<Store>, slots: usize) -> Driver {
        Driver {
            store: store.clone(),
            slots,
            epochs: Mutex::new(Vec::new()),
        }
    }
}

/// The server's side of one take: runs to its end whatever the caller does.
async fn serve(
    store: Arc<Store>,
    epoch: u64,
    slot: usize,
    within: Duration,
    tx: oneshot::Sender<bool>,
) {
    let until = Instant::now() + within;
    let delay = *store.grant_delay.lock();
    tokio::time::sleep(delay).await;
    loop {
        let freed = store.freed.notified();
        {
            let mut owners = store.owners.lock();
            if owners[slot].is_none() {
                owners[slot] = Some(epoch);
                let _ = tx.send(true);
                return;
            }
        }
        if tokio::time::timeout_at(until, freed).await.is_err() {
            let _ = tx.send(false);
            return;
        }
    }
}

impl SlotDriver for Driver {
    type Epoch = Epoch;
    type Ticket = Ticket;
    type Won = (u64, usize, i64);

    fn slots(&self) -> usize {
        self.slots
    }

    fn slice(&self) -> Duration {
        Duration::from_millis(200)
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        tokio::spawn(task);
    }

    fn rpc_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn epoch(&self, _deadline: Option<Instant>) -> Result<Option<Epoch>> {
        let (id, trigger) = (
            NEXT_EPOCH.fetch_add(1, Ordering::SeqCst),
            LossTrigger::root(),
        );
        self.epochs.lock().push((id, trigger.clone()));
        Ok(Some(Epoch { id, trigger }))
    }

    fn epoch_signal(&self, epoch: &Epoch) -> LossSignal {
        epoch.trigger.signal()
    }

    fn ticket(&self, epoch: &Epoch, slot: usize) -> Ticket {
        Ticket {
            store: self.store.clone(),
            epoch: epoch.id,
            slot,
            pending: None,
        }
    }

    async fn take(&self, _epoch: &Epoch, ticket: &mut Ticket, within: Duration) -> Result<bool> {
        let (tx, rx) = oneshot::channel();
        tokio::spawn(serve(
            ticket.store.clone(),
            ticket.epoch,
            ticket.slot,
            within,
            tx,
        ));
        ticket.pending = Some(rx);
        let answer = ticket.pending.as_mut().expect("just set").await;
        ticket.pending = None;
        answer.map_err(|_| Error::ConnectionLoss)
    }

    async fn confirm(&self, _epoch: &Epoch, _ticket: &mut Ticket) -> Result<Option<i64>> {
        if self.store.lose_next_confirm.swap(false, Ordering::SeqCst) {
            return Ok(None);
        }
        let wait = std::mem::take(&mut *self.store.next_confirm_waits.lock());
        if !wait.is_zero() {
            self.store.confirm_waiting.notify_one();
            tokio::time::sleep(wait).await;
        }
        Ok(Some(
            self.store.fence.fetch_add(1, Ordering::SeqCst) as i64 + 1,
        ))
    }

    async fn give_back(ticket: Ticket) {
        // In order after the take in flight, as on one connection.
        if let Some(pending) = ticket.pending {
            let _ = pending.await;
        }
        ticket.store.given_back.fetch_add(1, Ordering::SeqCst);
        ticket.store.release(ticket.epoch, ticket.slot);
    }

    fn won(&self, epoch: Epoch, ticket: Ticket, fence: i64) -> (u64, usize, i64) {
        (epoch.id, ticket.slot, fence)
    }
}

fn after(ms: u64) -> Option<Instant> {
    Some(Instant::now() + Duration::from_millis(ms))
}

#[tokio::test(start_paused = true)]
async fn one_holder_at_a_time_and_fences_increase() {
    let store = Store::new(1);
    let fences = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (store, fences) = (store.clone(), fences.clone());
        tasks.push(tokio::spawn(async move {
            let driver = Driver::new(&store, 1);
            for _ in 0..10 {
                let (epoch, slot, fence) = take(&driver, None).await.unwrap().unwrap();
                assert_eq!(store.holders(), 1, "one holder");
                fences.lock().push(fence);
                tokio::time::sleep(Duration::from_millis(30)).await;
                store.release(epoch, slot);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let fences = fences.lock().clone();
    assert_eq!(fences.len(), 40);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

#[tokio::test(start_paused = true)]
async fn a_timed_take_times_out_within_its_deadline_and_leaves_nothing() {
    let store = Store::new(1);
    let holder = Driver::new(&store, 1);
    let (epoch, _, _) = take(&holder, None).await.unwrap().unwrap();
    let waiter = Driver::new(&store, 1);
    let started = Instant::now();
    assert!(take(&waiter, after(700)).await.unwrap().is_none());
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(700), "{took:?}");
    assert!(
        took < Duration::from_millis(800),
        "sliced within the deadline: {took:?}"
    );
    assert_eq!(store.owners.lock()[0], Some(epoch), "only the holder");
    // A try of a taken slot fails at once.
    assert!(take(&waiter, after(0)).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_take_granted_after_the_caller_gave_up_is_given_back() {
    let store = Store::new(1);
    *store.grant_delay.lock() = Duration::from_millis(500);
    let driver = Driver::new(&store, 1);
    let cut = tokio::time::timeout(Duration::from_millis(100), take(&driver, None)).await;
    assert!(
        cut.is_err(),
        "the caller gave up while the take was in flight"
    );
    // The server grants the take later; the give-back, queued after it,
    // undoes it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(store.holders(), 0, "nothing is left held");
    assert_eq!(store.given_back.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn n_slots_hold_n_at_once() {
    let store = Store::new(3);
    let driver = Driver::new(&store, 3);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(take(&driver, after(0)).await.unwrap().expect("a free slot"));
    }
    let mut slots: Vec<usize> = held.iter().map(|h| h.1).collect();
    slots.sort_unstable();
    assert_eq!(slots, vec![0, 1, 2]);
    assert!(
        take(&driver, after(300)).await.unwrap().is_none(),
        "all taken"
    );
    let (epoch, slot, _) = held.pop().unwrap();
    let store2 = store.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        store2.release(epoch, slot);
    });
    let (_, got, _) = take(&driver, None).await.unwrap().expect("the freed slot");
    assert_eq!(got, slot);
}

#[tokio::test(start_paused = true)]
async fn a_lost_epoch_gives_back_and_starts_over() {
    let store = Store::new(1);
    let holder = Driver::new(&store, 1);
    let (h_epoch, h_slot, _) = take(&holder, None).await.unwrap().unwrap();
    let waiter = Arc::new(Driver::new(&store, 1));
    let w = waiter.clone();
    let waiting = tokio::spawn(async move { take(&*w, None).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (first, trigger) = waiter.epochs.lock()[0].clone();
    trigger.fire(LossReason::Revoked);
    tokio::time::sleep(Duration::from_millis(100)).await;
    store.release(h_epoch, h_slot);
    let (epoch, _, _) = waiting.await.unwrap().unwrap().unwrap();
    assert_ne!(epoch, first, "won under a new epoch, not the lost one");
    assert_eq!(waiter.epochs.lock().len(), 2);
    assert_eq!(store.holders(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_confirm_that_finds_the_holding_gone_gives_it_back_and_starts_over() {
    let store = Store::new(1);
    store.lose_next_confirm.store(true, Ordering::SeqCst);
    let driver = Driver::new(&store, 1);
    let (epoch, _, fence) = take(&driver, None).await.unwrap().unwrap();
    assert_eq!(fence, 1);
    let epochs = driver.epochs.lock().clone();
    assert_eq!(epochs.len(), 2);
    assert_eq!(epoch, epochs[1].0, "the second epoch won");
    assert_eq!(store.given_back.load(Ordering::SeqCst), 1);
    assert_eq!(store.holders(), 1);
}

/// A confirm that waits out a previous holder's deadline longer than its
/// epoch lives: the epoch lost while it waits, the slot is given back and won
/// under a new epoch (never handed over on the lost one), without waiting
/// for that confirm's end.
#[tokio::test(start_paused = true)]
async fn an_epoch_lost_while_confirming_gives_back_and_starts_over() {
    let store = Store::new(1);
    *store.next_confirm_waits.lock() = Duration::from_secs(4);
    let driver = Arc::new(Driver::new(&store, 1));
    let d = driver.clone();
    let started = Instant::now();
    let taking = tokio::spawn(async move { take(&*d, None).await });
    store.confirm_waiting.notified().await;
    let (first, trigger) = driver.epochs.lock()[0].clone();
    trigger.fire(LossReason::DeadlineExpired);
    let (epoch, _, _) = taking.await.unwrap().unwrap().unwrap();
    assert_ne!(epoch, first, "won under a new epoch, not the lost one");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the lost epoch's confirm was not waited for: {:?}",
        started.elapsed()
    );
    assert_eq!(store.given_back.load(Ordering::SeqCst), 1);
    assert_eq!(store.holders(), 1);
}
