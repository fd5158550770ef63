"""``simulmt serve --replicas N``: N ``simulmt serve`` processes behind HAProxy, supervised.

Why HAProxy (Debian's ``haproxy``, 2.6 LTS): it passes WebSockets through natively (an upgraded connection is a
tunnel, so a stream stays on one replica for its whole life by construction), balances long-lived connections
by the number open (``leastconn``), health-checks ``/health`` actively (a replica that drains answers 503 and gets
no new clients), retries a refused connection on another replica (``option redispatch``), and exports its own
Prometheus metrics (promex). nginx does the first two but its open-source build has no active health checks.

The supervisor writes, into ``--balancer-dir`` (default: a new temporary directory)::

    haproxy.cfg       the balancer: bind --host:--port, one server per replica, health checks, per-replica routes
    prometheus.yml    a scrape config for every replica's /metrics and the balancer's own
    replicas.json     the replicas' ports and process ids (and the balancer's), rewritten when one restarts

Routes through the balancer: everything of one replica (``/v1/stream``, ``/``, ``/health``, ``/metrics``), chosen
by HAProxy; ``/replicas/I/health`` and ``/replicas/I/metrics`` for replica I (1..N); ``/balancer/metrics``.

A replica that exits is started again (its clients were closed with a reason if it was stopped by SIGTERM; if it
was killed, HAProxy drops their connections, close code 1006). SIGTERM / Ctrl-C to the supervisor drains every
replica (each stream closed with 1001 and the reason), then stops the balancer.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path

from simulmt.errors import SimulmtError
from simulmt.service.guard import TOKEN_ENV, is_loopback

HEALTH_INTERVAL_MS = 500  # how often HAProxy checks each replica's /health
RESTART_DELAY = 1.0  # seconds before a replica that exited is started again


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def haproxy_config(host: str, port: int, replica_ports: list[int]) -> str:
    """The balancer for replicas on 127.0.0.1 at ``replica_ports``."""
    servers = "\n".join(f"    server r{i} 127.0.0.1:{p} check" for i, p in enumerate(replica_ports, 1))
    routes = "\n".join(
        f"    use_backend replica{i} if {{ path_beg /replicas/{i}/ }}" for i in range(1, len(replica_ports) + 1))
    singles = "\n".join(
        f"backend replica{i}\n    http-request set-path %[path,regsub(^/replicas/{i}/,/)]\n"
        f"    server r{i} 127.0.0.1:{p}\n" for i, p in enumerate(replica_ports, 1))
    return f"""# written by simulmt serve --replicas {len(replica_ports)}
global
    maxconn 4096  # 2 file descriptors each: within the usual limits

defaults
    mode http
    option http-server-close
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    timeout client-fin 5s
    timeout http-request 10s
    retries 3
    option redispatch

frontend simulmt
    bind {host}:{port}
    http-request use-service prometheus-exporter if {{ path /balancer/metrics }}
{routes}
    default_backend replicas

backend replicas
    balance leastconn
    option httpchk GET /health
    http-check expect status 200
    default-server inter {HEALTH_INTERVAL_MS} fall 1 rise 2
{servers}

{singles}"""


def prometheus_config(host: str, port: int, replica_ports: list[int], token_file: Path | None = None) -> str:
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in replica_ports)
    authorization = f"""
    authorization:
      type: Bearer
      credentials_file: {token_file}""" if token_file else ""
    return f"""# written by simulmt serve --replicas {len(replica_ports)}: every replica's /metrics, and the balancer's
scrape_configs:
  - job_name: simulmt
    scrape_interval: 5s{authorization}
    static_configs:
      - targets: [{targets}]
  - job_name: simulmt-balancer
    scrape_interval: 5s
    metrics_path: /balancer/metrics
    static_configs:
      - targets: ['{host}:{port}']
"""


@dataclass
class Replica:
    index: int
    port: int
    process: subprocess.Popen | None = None
    restarts: int = 0


def replica_command(options, port: int) -> list[str]:
    """``simulmt serve`` for one replica: the supervisor's options, on loopback at ``port``, one replica. The token
    goes in the environment (``replica_environment``), never on a command line; the replica serves the Host names
    the balancer's clients use (any, when the balancer is not on loopback and names none)."""
    command = [sys.executable, "-m", "simulmt", "serve", "--host", "127.0.0.1", "--port", str(port)]
    skip = {"host", "port", "replicas", "balancer_dir", "token", "token_file", "allow_host"}
    allow_host = options.allow_host or ("" if is_loopback(options.host) else "*")
    if allow_host:
        command += ["--allow-host", allow_host]
    for f in fields(options):
        value = getattr(options, f.name)
        if f.name in skip or value == f.default or value is None:
            continue
        flag = "--" + f.name.replace("_", "-")
        command += [flag] if value is True else [flag, str(value)]
    return command


def find_haproxy() -> str:
    found = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy")
                                             if os.access(p, os.X_OK)), None)
    if found is None:
        raise SimulmtError("--replicas needs HAProxy, the load balancer in front of the replicas: install it "
                           "(Debian/Ubuntu: apt-get install haproxy)")
    return found


class Supervisor:
    """Start the replicas and the balancer, restart a replica that exits, stop everything on SIGTERM / Ctrl-C."""

    def __init__(self, options, directory: Path):
        self.options, self.directory = options, directory
        self.port = options.port or free_port(options.host)  # --port 0: any free port, said in replicas.json
        self.replicas = [Replica(i, free_port()) for i in range(1, options.replicas + 1)]
        self.balancer: subprocess.Popen | None = None
        self.stopping = False
        self.token = options.resolved_token()

    def start_replica(self, replica: Replica) -> None:
        env = dict(os.environ)
        env.pop(TOKEN_ENV, None)
        if self.token:
            env[TOKEN_ENV] = self.token
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // len(self.replicas))))
        replica.process = subprocess.Popen(replica_command(self.options, replica.port), env=env)
        self.write_state()

    def write_state(self) -> None:
        state = {"balancer": {"host": self.options.host, "port": self.port,
                              "pid": self.balancer.pid if self.balancer else None},
                 "replicas": [{"index": r.index, "port": r.port, "pid": r.process.pid if r.process else None,
                               "restarts": r.restarts} for r in self.replicas]}
        tmp = self.directory / ".replicas.json.tmp"
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.directory / "replicas.json")

    def run(self) -> int:
        haproxy = find_haproxy()
        ports = [r.port for r in self.replicas]
        config = self.directory / "haproxy.cfg"
        config.write_text(haproxy_config(self.options.host, self.port, ports))
        token_file = None
        if self.token:  # Prometheus reads /metrics with it; only this user may read the file
            token_file = self.directory / "token"
            token_file.touch(mode=0o600)
            token_file.write_text(self.token + "\n")
        (self.directory / "prometheus.yml").write_text(prometheus_config(self.options.host, self.port, ports,
                                                                         token_file))
        checked = subprocess.run([haproxy, "-c", "-q", "-f", str(config)], capture_output=True, text=True)
        if checked.returncode != 0:
            raise SimulmtError(f"HAProxy refused the configuration {config}: {checked.stderr.strip()}")
        for replica in self.replicas:
            self.start_replica(replica)
        self.balancer = subprocess.Popen([haproxy, "-db", "-f", str(config)])
        self.write_state()
        _say(f"{len(self.replicas)} replicas (ports {', '.join(map(str, ports))}) behind HAProxy on "
             f"http://{self.options.host}:{self.port}/ ; config and state in {self.directory}")
        previous = {sig: signal.signal(sig, self.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self.watch()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.shutdown()

    def stop(self, sig, frame) -> None:
        self.stopping = True

    def watch(self) -> int:
        while not self.stopping:
            if self.balancer.poll() is not None:
                _say(f"HAProxy exited with code {self.balancer.returncode}; stopping the replicas")
                return 1
            for replica in self.replicas:
                code = replica.process.poll()
                if code is not None and not self.stopping:
                    _say(f"replica {replica.index} (port {replica.port}) exited with code {code}; starting it "
                         f"again in {RESTART_DELAY:g} s")
                    time.sleep(RESTART_DELAY)
                    replica.restarts += 1
                    self.start_replica(replica)
            time.sleep(0.2)
        return 0

    def shutdown(self) -> None:
        """Drain the replicas (SIGTERM: each stream closed with a reason), then stop the balancer."""
        running = [r.process for r in self.replicas if r.process and r.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.time() + 15
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.balancer and self.balancer.poll() is None:
            self.balancer.terminate()
            try:
                self.balancer.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.balancer.kill()


def _say(message: str) -> None:
    print(f"simulmt serve: {message}", file=sys.stderr, flush=True)


def run_replicas(options) -> int:
    """Serve ``options.replicas`` replicas behind HAProxy until SIGTERM / Ctrl-C."""
    try:
        find_haproxy()
        directory = Path(options.balancer_dir) if options.balancer_dir else Path(tempfile.mkdtemp(prefix="simulmt-"))
        directory.mkdir(parents=True, exist_ok=True)
        return Supervisor(options, directory).run()
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1
