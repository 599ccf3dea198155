"""Redis deployments on loopback for the tests: a primary with a replica watched by three Sentinels, and a Redis
Cluster of three primaries. Each is a context manager that stops every process it started."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from keyqueue._procs import die_with_parent, free_port, wait_or_kill
from keyqueue.redis import RedisServer, find_redis_server
from keyqueue.testing import eventually

SERVICE = "kqmaster"


@dataclass
class SentinelSetup:
    primary: RedisServer
    replica: RedisServer
    sentinel_ports: list[int]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", p) for p in self.sentinel_ports]

    def master_address(self) -> tuple[str, int]:
        """The address the Sentinels name as the master now."""
        with contextlib.closing(redis.Redis(port=self.sentinel_ports[0], decode_responses=True)) as s:
            host, port = s.sentinel_get_master_addr_by_name(SERVICE)
        return str(host), int(port)

    def wait_for_failover(self, old: RedisServer, new: RedisServer, timeout: float = 30.0) -> None:
        """Until every Sentinel names ``new`` as the master, and ``new`` says it is one."""
        def switched() -> bool:
            for port in self.sentinel_ports:
                with contextlib.closing(redis.Redis(port=port, decode_responses=True)) as s:
                    if int(s.sentinel_get_master_addr_by_name(SERVICE)[1]) != new.port:
                        return False
            with contextlib.closing(redis.Redis(port=new.port, decode_responses=True)) as c:
                return c.info("replication")["role"] == "master"
        eventually(switched, timeout=timeout, interval=0.1)

    def rejoin_empty(self, server: RedisServer, primary: RedisServer, timeout: float = 30.0) -> None:
        """Start ``server`` again after a crash that lost its data, as an operator must: a replica of ``primary``
        that the Sentinels cannot promote (``replica-priority 0``) until its first sync is done.

        The Sentinels would promote it before: a replica that never synced reports its link down since "-1", which
        passes their check, and a restarted node that comes back as an empty master is promotable until they
        convert it (about 8 s). A stall of ``primary`` past ``down-after-milliseconds`` in that window would make
        them fail over onto the empty node and turn ``primary`` into its replica, which drops everything."""
        server.extra_args = ("--replicaof", "127.0.0.1", str(primary.port), "--replica-priority", "0")
        server.start()
        with contextlib.closing(redis.Redis(port=server.port, decode_responses=True)) as c:
            eventually(lambda: c.info("replication").get("master_link_status") == "up", timeout=timeout)
            c.config_set("replica-priority", 100)


def _sentinel(directory: str, port: int, primary_port: int) -> subprocess.Popen[bytes]:
    conf = os.path.join(directory, f"sentinel-{port}.conf")
    with open(conf, "w") as f:
        f.write(f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 4000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n")
    command, preexec = die_with_parent([find_redis_server(), conf, "--sentinel",
                                        "--logfile", os.path.join(directory, f"sentinel-{port}.log")])
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=preexec, process_group=0)


@contextlib.contextmanager
def sentinel_setup() -> Iterator[SentinelSetup]:
    """A primary, a replica of it and three Sentinels (quorum 2, a master down after 1 s without answer)."""
    directory = tempfile.mkdtemp(prefix="keyqueue-sentinel-")
    primary = RedisServer().start()
    replica = RedisServer(extra_args=("--replicaof", "127.0.0.1", str(primary.port))).start()
    setup = SentinelSetup(primary, replica, [])
    try:
        with contextlib.closing(redis.Redis(port=replica.port, decode_responses=True)) as c:
            eventually(lambda: c.info("replication").get("master_link_status") == "up", timeout=20)
        for _ in range(3):
            port = free_port()
            setup.procs.append(_sentinel(directory, port, primary.port))
            setup.sentinel_ports.append(port)

        def all_watch() -> bool:
            for port in setup.sentinel_ports:
                try:
                    with contextlib.closing(redis.Redis(port=port, decode_responses=True)) as s:
                        info = s.sentinel_master(SERVICE)
                        if int(info["num-other-sentinels"]) < 2 or int(info["num-slaves"]) < 1:
                            return False
                except redis.ConnectionError:
                    return False
            return True
        eventually(all_watch, timeout=30, interval=0.1)
        yield setup
    finally:
        for proc in setup.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
            wait_or_kill(proc, 5)
        for server in (primary, replica):
            if server.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(server.pid, signal.SIGCONT)  # a test may have stopped it
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class ClusterSetup:
    nodes: list[RedisServer]

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(port=self.nodes[0].port, **kwargs)

    def node_id(self, server: RedisServer) -> str:
        with contextlib.closing(redis.Redis(port=server.port, decode_responses=True)) as c:
            return str(c.execute_command("CLUSTER", "MYID"))

    def owner(self, slot: int) -> RedisServer:
        """The node that serves ``slot`` now."""
        with contextlib.closing(redis.Redis(port=self.nodes[0].port, decode_responses=True)) as c:
            for start, end, primary, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    port = int(primary[1])
                    return next(n for n in self.nodes if n.port == port)
        raise LookupError(slot)

    def views(self, slot: int) -> dict[int, str]:
        """Each node's view of ``slot`` (by node port): the port of the node it routes the slot to, and
        ``migrating``/``importing`` if it has the slot in that state itself (CLUSTER NODES)."""
        ports = {self.node_id(n): n.port for n in self.nodes}
        views = {}
        for node in self.nodes:
            with contextlib.closing(redis.Redis(port=node.port, decode_responses=True)) as c:
                text = c.execute_command("CLUSTER", "NODES")
            owner, marks = "?", []
            for line in (text if isinstance(text, str) else str(text)).splitlines():
                fields = line.split()
                node_id = fields[0]
                for part in fields[8:]:
                    if part.startswith("["):  # [slot->-id] migrating, [slot-<-id] importing (own line only)
                        if part.startswith(f"[{slot}->-"):
                            marks.append("migrating")
                        elif part.startswith(f"[{slot}-<-"):
                            marks.append("importing")
                        continue
                    start, _, end = part.partition("-")
                    if int(start) <= slot <= int(end or start):
                        owner = str(ports.get(node_id, node_id))
            views[node.port] = " ".join([owner, *marks])
        return views


def _cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is a valid port and free too: a cluster node binds both."""
    for _ in range(100):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


@contextlib.contextmanager
def cluster_setup(size: int = 3) -> Iterator[ClusterSetup]:
    """``size`` cluster-enabled primaries with the 16384 slots split evenly, met and agreeing (cluster_state ok)."""
    nodes: list[RedisServer] = []
    try:
        for _ in range(size):
            nodes.append(RedisServer(port=_cluster_port(), extra_args=(
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "5000")).start())
        per = 16384 // size
        for i, node in enumerate(nodes):
            with contextlib.closing(redis.Redis(port=node.port)) as c:
                # Distinct config epochs from the start, as redis-cli --cluster create gives them. Left equal, the
                # nodes settle them by collision later, and a slot move meanwhile can leave its target with a
                # lower epoch than the source: the source's last gossip then takes the slot back on the target,
                # which routes it to the source while the source routes it to the target (MOVED both ways, for
                # good).
                c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
                end = 16384 if i == size - 1 else (i + 1) * per
                c.execute_command("CLUSTER", "ADDSLOTS", *range(i * per, end))
                for other in nodes[:i]:
                    c.execute_command("CLUSTER", "MEET", "127.0.0.1", other.port)

        def ok() -> bool:
            for node in nodes:
                with contextlib.closing(redis.Redis(port=node.port, decode_responses=True)) as c:
                    info = c.execute_command("CLUSTER", "INFO")
                    text = info if isinstance(info, str) else str(info)
                    if "cluster_state:ok" not in text or f"cluster_known_nodes:{size}" not in text:
                        return False
            return True
        eventually(ok, timeout=30, interval=0.1)
        yield ClusterSetup(nodes)
    finally:
        for node in nodes:
            node.stop()


def migrate_slot(setup: ClusterSetup, slot: int, target: RedisServer, *, pause: float = 0.0,
                 batch: int = 1) -> None:
    """Move ``slot`` to ``target`` as redis-cli --cluster reshard does: IMPORTING/MIGRATING, MIGRATE the keys
    ``batch`` at a time (``pause`` seconds between batches: the slot stays half-moved meanwhile), then NODE."""
    source = setup.owner(slot)
    source_id, target_id = setup.node_id(source), setup.node_id(target)
    with contextlib.closing(redis.Redis(port=source.port, decode_responses=True)) as src, \
            contextlib.closing(redis.Redis(port=target.port, decode_responses=True)) as dst:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while True:
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                break
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            if pause:
                time.sleep(pause)  # keeps the slot half-moved for a while; nothing waits on it
        # The order redis-cli uses: the target first (it stops importing and owns the slot), then the source (it
        # stops migrating and answers MOVED), then every other node.
        for node in sorted(setup.nodes, key=lambda n: (n is not target, n is not source)):
            with contextlib.closing(redis.Redis(port=node.port)) as c:
                c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    # As redis-cli does after a move: wait until every node routes the slot to the target and none has it half-moved.
    agreed = {n.port: str(target.port) for n in setup.nodes}

    def settled() -> bool:
        views = setup.views(slot)
        assert views == agreed, f"slot {slot}, source {source.port}, target {target.port}: views {views}"
        return True
    eventually(settled, timeout=20, interval=0.05)
