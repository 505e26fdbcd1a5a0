// An Apache Curator client driven over stdin/stdout, for interop tests.
//
// Usage: java -cp <classes>:<jars> CuratorPeer <connect string> <session timeout ms>
//
// Prints READY once connected, then answers one request per line with one
// line: "OK [fields]" or "ERR <message>". Requests:
//
//   lock <path> [wait_ms]   InterProcessMutex.acquire() / acquire(wait_ms)
//                           -> OK acquired | OK timeout
//   release                 release the held mutex -> OK
//   rwlock <path> read|write [wait_ms]
//                           a new InterProcessReadWriteLock's readLock() or
//                           writeLock(): acquire() / acquire(wait_ms)
//                           -> OK acquired | OK timeout (one held per side)
//   rwrelease read|write    release that held side -> OK
//   latch <path> <id>       start a LeaderLatch with that id -> OK
//   is-leader               -> OK yes | OK no
//   await-leader <ms>       LeaderLatch.await(ms) -> OK yes | OK no
//   close-latch             -> OK
//   selector <path> <id>    start a LeaderSelector (no auto-requeue) whose
//                           takeLeadership sets "leading" and blocks until
//                           resign or interrupted -> OK
//   is-leading              -> OK yes | OK no
//   resign                  make takeLeadership return; waits until it has
//                           -> OK
//   close-selector          -> OK
//   children <path>         -> OK <sorted, comma-separated children>
//   exit                    close everything -> OK, then the JVM exits
//
// Only this protocol goes to stdout; Curator and ZooKeeper log to stderr.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorPeer {
    private final CuratorFramework client;
    private InterProcessMutex mutex;
    // The held sides of read-write locks (each its own lock object, so
    // Curator's reentrancy never lets one side in for the other).
    private InterProcessMutex rwRead;
    private InterProcessMutex rwWrite;
    private LeaderLatch latch;
    private LeaderSelector selector;
    private volatile boolean leading;
    // Permits to leave takeLeadership; one per resign.
    private final Semaphore resignations = new Semaphore(0);
    // Released each time takeLeadership returns.
    private final Semaphore leadershipEnded = new Semaphore(0);

    private CuratorPeer(CuratorFramework client) {
        this.client = client;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: CuratorPeer <connect string> <session timeout ms>");
            System.exit(2);
        }
        int sessionMs = Integer.parseInt(args[1]);
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                args[0], sessionMs, 10_000, new ExponentialBackoffRetry(100, 5));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            System.out.println("ERR not connected to " + args[0] + " within 30 s");
            System.exit(1);
        }
        CuratorPeer peer = new CuratorPeer(client);
        System.out.println("READY");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        boolean running = true;
        while (running && (line = in.readLine()) != null) {
            String reply;
            String[] words = line.trim().split("\\s+");
            try {
                reply = "OK " + peer.handle(words);
                running = !words[0].equals("exit");
            } catch (Exception e) {
                String msg = e.getClass().getSimpleName() + ": " + e.getMessage();
                reply = "ERR " + msg.replace('\n', ' ');
                System.err.println("request " + line + " failed");
                e.printStackTrace();
            }
            System.out.println(reply.trim());
            System.out.flush();
        }
        System.exit(0);
    }

    private String handle(String[] w) throws Exception {
        switch (w[0]) {
            case "lock": {
                need(w, 2, 3);
                if (mutex != null) {
                    throw new IllegalStateException("already holds a mutex (release first)");
                }
                InterProcessMutex m = new InterProcessMutex(client, w[1]);
                if (w.length == 3) {
                    if (!m.acquire(Long.parseLong(w[2]), TimeUnit.MILLISECONDS)) {
                        return "timeout";
                    }
                } else {
                    m.acquire();
                }
                mutex = m;
                return "acquired";
            }
            case "release": {
                need(w, 1, 1);
                if (mutex == null) {
                    throw new IllegalStateException("holds no mutex");
                }
                InterProcessMutex m = mutex;
                mutex = null;
                m.release();
                return "";
            }
            case "rwlock": {
                need(w, 3, 4);
                boolean write = side(w[2]);
                if ((write ? rwWrite : rwRead) != null) {
                    throw new IllegalStateException("already holds that side (rwrelease first)");
                }
                InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, w[1]);
                InterProcessMutex m = write ? rw.writeLock() : rw.readLock();
                if (w.length == 4) {
                    if (!m.acquire(Long.parseLong(w[3]), TimeUnit.MILLISECONDS)) {
                        return "timeout";
                    }
                } else {
                    m.acquire();
                }
                if (write) {
                    rwWrite = m;
                } else {
                    rwRead = m;
                }
                return "acquired";
            }
            case "rwrelease": {
                need(w, 2, 2);
                boolean write = side(w[1]);
                InterProcessMutex m = write ? rwWrite : rwRead;
                if (m == null) {
                    throw new IllegalStateException("holds no " + w[1] + " lock");
                }
                if (write) {
                    rwWrite = null;
                } else {
                    rwRead = null;
                }
                m.release();
                return "";
            }
            case "latch": {
                need(w, 3, 3);
                if (latch != null) {
                    throw new IllegalStateException("a latch is running (close-latch first)");
                }
                LeaderLatch l = new LeaderLatch(client, w[1], w[2]);
                l.start();
                latch = l;
                return "";
            }
            case "is-leader":
                need(w, 1, 1);
                return yesNo(runningLatch().hasLeadership());
            case "await-leader":
                need(w, 2, 2);
                return yesNo(runningLatch().await(Long.parseLong(w[1]), TimeUnit.MILLISECONDS));
            case "close-latch": {
                need(w, 1, 1);
                LeaderLatch l = runningLatch();
                latch = null;
                l.close();
                return "";
            }
            case "selector": {
                need(w, 3, 3);
                if (selector != null) {
                    throw new IllegalStateException("a selector is running (close-selector first)");
                }
                LeaderSelector s = new LeaderSelector(client, w[1], new LeaderSelectorListenerAdapter() {
                    @Override
                    public void takeLeadership(CuratorFramework c) throws Exception {
                        // A resign is only sent while leading: none is due yet.
                        resignations.drainPermits();
                        leading = true;
                        try {
                            resignations.acquire();
                        } finally {
                            leading = false;
                            leadershipEnded.release();
                        }
                    }
                });
                s.setId(w[2]);
                s.start();
                selector = s;
                return "";
            }
            case "is-leading":
                need(w, 1, 1);
                return yesNo(leading);
            case "resign": {
                need(w, 1, 1);
                runningSelector();
                if (!leading) {
                    throw new IllegalStateException("not leading");
                }
                // The ends of earlier terms (interrupted ones) are not this one.
                leadershipEnded.drainPermits();
                resignations.release();
                if (!leadershipEnded.tryAcquire(10, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("takeLeadership did not return within 10 s");
                }
                return "";
            }
            case "close-selector": {
                need(w, 1, 1);
                LeaderSelector s = runningSelector();
                selector = null;
                s.close();
                return "";
            }
            case "children": {
                need(w, 2, 2);
                List<String> children = new ArrayList<>(client.getChildren().forPath(w[1]));
                Collections.sort(children);
                return String.join(",", children);
            }
            case "exit":
                need(w, 1, 1);
                closeAll();
                return "";
            default:
                throw new IllegalArgumentException("unknown request " + w[0]);
        }
    }

    private void closeAll() throws Exception {
        if (mutex != null) {
            mutex.release();
            mutex = null;
        }
        if (rwRead != null) {
            rwRead.release();
            rwRead = null;
        }
        if (rwWrite != null) {
            rwWrite.release();
            rwWrite = null;
        }
        if (latch != null) {
            latch.close();
            latch = null;
        }
        if (selector != null) {
            selector.close();
            selector = null;
        }
        client.close();
    }

    private LeaderLatch runningLatch() {
        if (latch == null) {
            throw new IllegalStateException("no latch (send latch first)");
        }
        return latch;
    }

    private LeaderSelector runningSelector() {
        if (selector == null) {
            throw new IllegalStateException("no selector (send selector first)");
        }
        return selector;
    }

    private static boolean side(String s) {
        switch (s) {
            case "read":
                return false;
            case "write":
                return true;
            default:
                throw new IllegalArgumentException("a side is read or write, not " + s);
        }
    }

    private static String yesNo(boolean b) {
        return b ? "yes" : "no";
    }

    private static void need(String[] w, int min, int max) {
        if (w.length < min || w.length > max) {
            throw new IllegalArgumentException(
                    w[0] + " takes " + (min - 1) + (max > min ? ".." + (max - 1) : "") + " arguments");
        }
    }
}
