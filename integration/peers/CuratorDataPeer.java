// Curator's data recipes, one request per run, for the interop tests of the
// shared counter (integration/tests/zk_counter_interop.rs).
//
// Usage: java CuratorDataPeer <connect string> count-add <path> <n>
//        java CuratorDataPeer <connect string> count-get <path>
//
// count-add: SharedCount(path, seed 0).trySetCount(versioned, value + 1),
// retried until it wins, n times; prints "OK value=<last set>".
// count-get: prints "OK value=<value> version=<node version>".
// Errors: "ERR <message>" and exit status 1. Logs go to stderr.

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.retry.RetryNTimes;

public class CuratorDataPeer {
    public static void main(String[] args) throws Exception {
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(args[0], 10000, 10000, new RetryNTimes(10, 200));
        client.start();
        try {
            client.blockUntilConnected();
            SharedCount count = new SharedCount(client, args[2], 0);
            count.start();
            try {
                switch (args[1]) {
                    case "count-add": {
                        int n = Integer.parseInt(args[3]);
                        int last = 0;
                        for (int i = 0; i < n; i++) {
                            while (true) {
                                VersionedValue<Integer> seen = count.getVersionedValue();
                                if (count.trySetCount(seen, seen.getValue() + 1)) {
                                    last = seen.getValue() + 1;
                                    break;
                                }
                            }
                        }
                        System.out.println("OK value=" + last);
                        break;
                    }
                    case "count-get": {
                        VersionedValue<Integer> seen = count.getVersionedValue();
                        System.out.println(
                                "OK value=" + seen.getValue() + " version=" + seen.getVersion());
                        break;
                    }
                    default:
                        System.out.println("ERR unknown request " + args[1]);
                        System.exit(1);
                }
            } finally {
                count.close();
            }
        } catch (Exception e) {
            System.out.println("ERR " + e);
            System.exit(1);
        } finally {
            client.close();
        }
    }
}
