"""kazoo's Lock in a loop, for the bench's M1z and M2z
(integration/src/bin/bench/zk_peers.rs).

Usage: /usr/bin/python3 -u zk_bench.py <connect string>

Run it with Debian's python3: python3-kazoo is installed for that one only.
Prints READY once connected, then answers one request per line with one
line, as the interop peers do (integration/src/worker.rs):

  run <path> <seconds>   kazoo's Lock(path): acquire() + release() until
                         <seconds> have passed -> OK, then four numbers a
                         cycle: the monotonic clock's nanoseconds at the
                         acquire's call, at its return, at the release's
                         call and at its return
  exit                   stop the client -> OK, then exit

Several processes running `run` on one path at once hand the lock on to
one another; the bench merges their times. kazoo logs to stderr.
"""

import logging
import sys
import time

from kazoo.client import KazooClient


def run(client, locks, path, seconds):
    lock = locks.get(path)
    if lock is None:
        lock = locks[path] = client.Lock(path, "zk-bench")
    clock = time.monotonic_ns
    until = clock() + int(float(seconds) * 1e9)
    times = []
    while True:
        start = clock()
        if start >= until:
            break
        lock.acquire()
        acquired = clock()
        releasing = clock()
        lock.release()
        times.extend((start, acquired, releasing, clock()))
    return " ".join(map(str, times))


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: zk_bench.py <connect string>\n")
        sys.exit(2)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    client = KazooClient(hosts=sys.argv[1], timeout=10.0)
    client.start(timeout=30)
    locks = {}
    print("READY", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["run"] and len(words) == 3:
            try:
                print("OK " + run(client, locks, words[1], words[2]), flush=True)
            except Exception as e:  # a failure is a reply, never a crash
                logging.exception("run failed")
                print("ERR %s: %s" % (type(e).__name__, e), flush=True)
        elif words == ["exit"]:
            client.stop()
            client.close()
            print("OK", flush=True)
            return
        else:
            print("ERR unknown request %r" % line.strip(), flush=True)


if __name__ == "__main__":
    main()
