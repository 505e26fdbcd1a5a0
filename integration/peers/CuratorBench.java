// Curator's InterProcessMutex in a loop, for the bench's M1z and M2z
// (integration/src/bin/bench/zk_peers.rs).
//
// Usage: java -cp <classes>:<jars> CuratorBench <connect string>
//
// Prints READY once connected, then answers one request per line with one
// line, as the interop peers do (integration/src/worker.rs):
//
//   run <path> <seconds>   InterProcessMutex(path): acquire() + release()
//                          until <seconds> have passed -> OK, then four
//                          numbers a cycle: System.nanoTime() (the
//                          monotonic clock) at the acquire's call, at its
//                          return, at the release's call and at its return
//   exit                   close the client -> OK, then the JVM exits
//
// Several processes running `run` on one path at once hand the mutex on to
// one another; the bench merges their times. Curator and ZooKeeper log to
// stderr.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorBench {
    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: CuratorBench <connect string>");
            System.exit(2);
        }
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                args[0], 10_000, 10_000, new ExponentialBackoffRetry(100, 5));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            System.out.println("ERR not connected to " + args[0] + " within 30 s");
            System.exit(1);
        }
        Map<String, InterProcessMutex> mutexes = new HashMap<>();
        System.out.println("READY");
        System.out.flush();
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            String[] words = line.trim().split("\\s+");
            String reply;
            if (words.length == 3 && words[0].equals("run")) {
                try {
                    InterProcessMutex mutex =
                            mutexes.computeIfAbsent(words[1], p -> new InterProcessMutex(client, p));
                    reply = "OK " + run(mutex, Double.parseDouble(words[2]));
                } catch (Exception e) {
                    e.printStackTrace();
                    reply = "ERR " + e.toString().replace('\n', ' ');
                }
            } else if (words.length == 1 && words[0].equals("exit")) {
                client.close();
                System.out.println("OK");
                System.out.flush();
                return;
            } else {
                reply = "ERR unknown request " + line.trim();
            }
            System.out.println(reply);
            System.out.flush();
        }
    }

    private static String run(InterProcessMutex mutex, double seconds) throws Exception {
        long until = System.nanoTime() + (long) (seconds * 1e9);
        StringBuilder times = new StringBuilder();
        while (true) {
            long start = System.nanoTime();
            if (start >= until) {
                break;
            }
            mutex.acquire();
            long acquired = System.nanoTime();
            long releasing = System.nanoTime();
            mutex.release();
            long end = System.nanoTime();
            times.append(start).append(' ').append(acquired).append(' ')
                    .append(releasing).append(' ').append(end).append(' ');
        }
        return times.toString().trim();
    }
}
