// Curator's data recipes, one request per run, for the interop tests of the
// shared counter (integration/tests/zk_counter_interop.rs) and of group
// membership (integration/tests/zk_group_interop.rs).
//
// Usage: java CuratorDataPeer <connect string> count-add <path> <n>
//        java CuratorDataPeer <connect string> count-get <path>
//        java CuratorDataPeer <connect string> group-member <path> <id> <data> <other id> <wait ms>
//
// count-add: SharedCount(path, seed 0).trySetCount(versioned, value + 1),
// retried until it wins, n times; prints "OK value=<last set>".
// count-get: prints "OK value=<value> version=<node version>".
// group-member: GroupMember(path, id, data) started; once its view holds
// both <id> and <other id> (at most <wait ms>), prints
// "OK members=<id>=<data>,..." (sorted by id), then closes (leaves).
// Errors: "ERR <message>" and exit status 1. Logs go to stderr.

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.nodes.GroupMember;
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
            if (args[1].equals("group-member")) {
                groupMember(client, args);
                return;
            }
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

    static void groupMember(CuratorFramework client, String[] args) throws Exception {
        GroupMember member =
                new GroupMember(client, args[2], args[3], args[4].getBytes("UTF-8"));
        member.start();
        try {
            long deadline = System.currentTimeMillis() + Long.parseLong(args[6]);
            java.util.Map<String, byte[]> seen = member.getCurrentMembers();
            while (!seen.containsKey(args[3]) || !seen.containsKey(args[5])) {
                if (System.currentTimeMillis() > deadline) {
                    System.out.println("ERR the view never held both: " + seen.keySet());
                    System.exit(1);
                }
                Thread.sleep(50);
                seen = member.getCurrentMembers();
            }
            StringBuilder out = new StringBuilder("OK members=");
            String sep = "";
            for (String id : new java.util.TreeSet<>(seen.keySet())) {
                out.append(sep).append(id).append('=').append(new String(seen.get(id), "UTF-8"));
                sep = ",";
            }
            System.out.println(out);
        } finally {
            member.close();
        }
    }
}
