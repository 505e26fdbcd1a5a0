//! A double barrier used round after round by the same members, the same
//! on every store: a member that leaves and enters again at once never
//! holds back a slower member still leaving the round before (its leave
//! waits for its own round only), and nobody hangs.

use std::time::Duration;

use integration::{scale, Proxy};
use recipes_core::Client;

use super::{name, Kit};

const TTL: Duration = Duration::from_secs(10);
const RPC: Duration = Duration::from_secs(5);
const ROUNDS: usize = 20;

/// Two clients, count 2, loop `ROUNDS` times {enter; leave}, each on its
/// own thread, every wait bounded and asserted to succeed. One client is
/// behind a proxy that delays each reply: the fast one's leave returns
/// and its next enter's member is in before the slow one's leave reads
/// again, which (were the new member counted) would wait for it, while it
/// waits in enter for the slow one.
pub fn back_to_back_rounds_never_hang<K: Kit>(kit: &K) {
    let n = name("double-rounds");
    let proxy = Proxy::start(kit.server_addr());
    proxy.set_delay(Duration::from_millis(40));
    let slow = kit.connect_via(proxy.addr(), TTL, RPC).expect("connect");
    let fast = kit.connect(TTL).expect("connect");
    let bound = scale(Duration::from_secs(10));
    let members: Vec<_> = [("slow", slow), ("fast", fast)]
        .into_iter()
        .map(|(who, c)| {
            let n = n.clone();
            std::thread::spawn(move || {
                let barrier = c.double_barrier(&n, 2).unwrap();
                for round in 0..ROUNDS {
                    let member = barrier
                        .enter_timeout(bound)
                        .unwrap()
                        .unwrap_or_else(|| panic!("{who}: round {round}: enter timed out"));
                    let left = member.leave_timeout(bound).unwrap();
                    assert!(left, "{who}: round {round}: leave timed out");
                }
                c.close().unwrap();
            })
        })
        .collect();
    for m in members {
        m.join().unwrap();
    }
    assert!(
        kit.entries_under(&n).is_empty(),
        "left behind: {:?}",
        kit.entries_under(&n)
    );
}
