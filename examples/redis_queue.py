"""One queue shared by several processes on Redis: each key handed to one worker at a time, whichever process.

The parent starts a throwaway `redis-server` (`keyqueue.redis.RedisServer`; point `url=` at your own Redis
instead), adds 20 keys twice each (the second adds are deduplicated by Redis), and runs two worker processes that
take keys from the queue named "jobs" until it is empty. Run it with `.venv/bin/python examples/redis_queue.py`.
"""

import subprocess
import sys
import time

from keyqueue.redis import Queue, RedisServer

KEYS = [f"default/job-{i}" for i in range(20)]


def worker(url: str, name: str) -> None:
    q = Queue("jobs", url=url, lease=10.0)  # a key's lease is renewed while this process holds it
    try:
        while True:
            try:
                key = q.get(timeout=1.0)
            except TimeoutError:
                return  # nothing left
            time.sleep(0.05)  # the work
            print(f"{name} {key}", flush=True)
            q.done(key)
    finally:
        q.close()


def main() -> None:
    with RedisServer() as server:
        q = Queue("jobs", url=server.url)
        adds = [q.add(k) for k in KEYS + KEYS]
        print(f"{len(adds)} adds, {len(q)} keys waiting")  # 40 adds, 20 keys waiting
        workers = [subprocess.Popen([sys.executable, __file__, server.url, f"worker-{i}"], stdout=subprocess.PIPE,
                                    text=True) for i in range(2)]
        lines = [line.split() for w in workers for line in w.communicate(timeout=60)[0].splitlines()]
        handled = sorted(key for _, key in lines)
        assert handled == sorted(KEYS), handled  # every key once, by one worker or the other
        print(f"{len(handled)} keys handled by {len({who for who, _ in lines})} processes, each key once")
        q.delete()  # the queue's state lives in Redis until deleted
        q.close()


if __name__ == "__main__":
    if len(sys.argv) == 3:
        worker(sys.argv[1], sys.argv[2])
    else:
        main()
