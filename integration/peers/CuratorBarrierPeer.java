// Curator's barriers, one request per run, for the barrier interop tests
// (integration/tests/zk_barrier_interop.rs).
//
// Usage: java CuratorBarrierPeer <connect string> barrier-set <path>
//        java CuratorBarrierPeer <connect string> barrier-remove <path>
//        java CuratorBarrierPeer <connect string> barrier-wait <path> <ms>
//        java CuratorBarrierPeer <connect string> double <path> <count> <members> <ms>
//
// barrier-set, barrier-remove: DistributedBarrier.setBarrier() or
// removeBarrier(); prints "OK".
// barrier-wait: DistributedBarrier.waitOnBarrier(ms); prints "OK down" when
// it returned true, "OK up" when the wait timed out.
// double: <members> DistributedDoubleBarrier(path, count) members, each in
// its own thread on this one client: enter(ms), then leave(ms); prints
// "OK entered=<members that entered> left=<members that left>".
// Errors: "ERR <message>" and exit status 1. Logs go to stderr.

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.retry.RetryNTimes;

public class CuratorBarrierPeer {
    public static void main(String[] args) throws Exception {
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(args[0], 10000, 10000, new RetryNTimes(10, 200));
        client.start();
        try {
            client.blockUntilConnected();
            String path = args[2];
            switch (args[1]) {
                case "barrier-set":
                    new DistributedBarrier(client, path).setBarrier();
                    System.out.println("OK");
                    break;
                case "barrier-remove":
                    new DistributedBarrier(client, path).removeBarrier();
                    System.out.println("OK");
                    break;
                case "barrier-wait": {
                    long ms = Long.parseLong(args[3]);
                    boolean down =
                            new DistributedBarrier(client, path)
                                    .waitOnBarrier(ms, TimeUnit.MILLISECONDS);
                    System.out.println(down ? "OK down" : "OK up");
                    break;
                }
                case "double": {
                    int count = Integer.parseInt(args[3]);
                    int members = Integer.parseInt(args[4]);
                    long ms = Long.parseLong(args[5]);
                    AtomicInteger entered = new AtomicInteger();
                    AtomicInteger left = new AtomicInteger();
                    List<String> failed = new ArrayList<>();
                    List<Thread> threads = new ArrayList<>();
                    for (int i = 0; i < members; i++) {
                        Thread t =
                                new Thread(
                                        () -> {
                                            try {
                                                DistributedDoubleBarrier b =
                                                        new DistributedDoubleBarrier(
                                                                client, path, count);
                                                if (b.enter(ms, TimeUnit.MILLISECONDS)) {
                                                    entered.incrementAndGet();
                                                    if (b.leave(ms, TimeUnit.MILLISECONDS)) {
                                                        left.incrementAndGet();
                                                    }
                                                }
                                            } catch (Exception e) {
                                                synchronized (failed) {
                                                    failed.add(e.toString());
                                                }
                                            }
                                        });
                        t.start();
                        threads.add(t);
                    }
                    for (Thread t : threads) {
                        t.join();
                    }
                    if (!failed.isEmpty()) {
                        System.out.println("ERR " + String.join("; ", failed));
                        System.exit(1);
                    }
                    System.out.println("OK entered=" + entered + " left=" + left);
                    break;
                }
                default:
                    System.out.println("ERR unknown request " + args[1]);
                    System.exit(1);
            }
        } catch (Exception e) {
            System.out.println("ERR " + e);
            System.exit(1);
        } finally {
            client.close();
        }
    }
}
