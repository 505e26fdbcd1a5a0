# redis-py's Lock, uncontended: acquire + release for SECONDS on one
# connection. Prints "<cycles> <elapsed seconds>". Run by M1c when
# `import redis` works (pip install redis).
import sys
import time

import redis

url, seconds = sys.argv[1], float(sys.argv[2])
r = redis.Redis.from_url(url)
lock = r.lock("/bench/redis-py/m1c", timeout=10)
started = time.monotonic()
cycles = 0
while time.monotonic() - started < seconds:
    assert lock.acquire(blocking=False)
    lock.release()
    cycles += 1
print(cycles, time.monotonic() - started)
