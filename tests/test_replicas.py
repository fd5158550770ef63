"""``simulmt serve --replicas 2`` (issue 16): two real replica processes of a tiny model behind a real HAProxy on
loopback. Concurrent clients get what ``translate`` gives; a replica stopped mid-run closes its clients with a
reason while the other replica's streams finish untouched and new clients go to the live one; the supervisor
starts the stopped replica again; every replica's metrics are reachable through the balancer."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")
from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from helpers import save_tiny_model  # noqa: E402
from tiny_models import CORPUS  # noqa: E402

pytestmark = pytest.mark.slow  # three processes that load torch, and a balancer: about a minute

HAPROXY = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if os.access(p, os.X_OK)), None)
LINES = [line for line in CORPUS if 4 <= len(line.split()) <= 12][:12]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def wait_for(condition, timeout: float = 180.0, what: str = "") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if HAPROXY is None:
        if os.environ.get("CI"):
            pytest.fail("haproxy is not installed (.ci/run installs it)")
        pytest.skip("haproxy is not installed (Debian: apt-get install haproxy)")
    folder = tmp_path_factory.mktemp("replicas")
    save_tiny_model(folder / "model")
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    log = open(folder / "supervisor.log", "w")
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "simulmt", "serve", "--replicas", "2", "--port", str(port), "--model",
         str(folder / "model"), "--adapter", "none", "--dtype", "float32",  # compared with float32 translations
         "--balancer-dir", str(folder / "lb")],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"127.0.0.1:{port}"
    try:
        def ready() -> bool:
            if supervisor.poll() is not None:
                raise AssertionError((folder / "supervisor.log").read_text()[-3000:])
            return all(get(f"http://{base}/replicas/{i}/health")[0] == 200 for i in (1, 2)) \
                and get(f"http://{base}/health")[0] == 200

        wait_for(ready, what="both replicas healthy behind the balancer")
        time.sleep(1.5)  # HAProxy's own checks: a server is up after 2 good ones, 0.5 s apart
        yield {"address": base, "folder": folder, "supervisor": supervisor}
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(timeout=60)
        except subprocess.TimeoutExpired:
            supervisor.kill()
        log.close()


@pytest.fixture(scope="module")
def translator(cluster):
    from simulmt.translator import Translator

    return Translator.load(str(cluster["folder"] / "model"), adapter="none", device="cpu")


def state(cluster) -> dict:
    return json.loads((cluster["folder"] / "lb" / "replicas.json").read_text())


def talk(address: str, line: str, pace: float = 0.0, opened: threading.Event | None = None) -> dict:
    """One client: the line word by word (``pace`` seconds apart), then end; every message and the close."""
    messages = []
    with connect(f"ws://{address}/v1/stream?k=3", open_timeout=30) as ws:
        if opened is not None:
            opened.set()
        try:
            for word in line.split():
                ws.send(json.dumps({"type": "text", "text": word + " "}))
                time.sleep(pace)
            ws.send(json.dumps({"type": "end"}))
        except ConnectionClosed:  # closed by the server while we were still talking: read what it said
            pass
        try:
            while True:
                messages.append(json.loads(ws.recv(timeout=60)))
        except ConnectionClosed:
            pass
        return {"messages": messages, "code": ws.close_code, "reason": ws.close_reason}


def run_clients(address: str, lines: list[str], pace: float = 0.0) -> list[dict]:
    results: list[dict | None] = [None] * len(lines)

    def one(i: int) -> None:
        results[i] = talk(address, lines[i], pace)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(lines))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    return results


def translation(result: dict) -> str | None:
    sentences = [m for m in result["messages"] if m["type"] == "sentence"]
    return sentences[0]["translation"] if len(sentences) == 1 else None


def streams_served(address: str, replica: int) -> float:
    status, text = get(f"http://{address}/replicas/{replica}/metrics")
    assert status == 200
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith("simulmt_streams_total ")))


def test_eight_concurrent_clients_get_translate_and_both_replicas_serve(cluster, translator):
    address = cluster["address"]
    before = [streams_served(address, i) for i in (1, 2)]
    results = run_clients(address, LINES[:8], pace=0.05)
    for line, result in zip(LINES[:8], results):
        assert result["code"] == 1000, result
        assert translation(result) == translator.translate(line, "expost", "wait-k", k=3).prediction
    served = [streams_served(address, i) - b for i, b in zip((1, 2), before)]
    assert sum(served) == 8 and min(served) >= 2  # leastconn spread the concurrent streams over both
    status, text = get(f"http://{address}/balancer/metrics")
    assert status == 200 and "haproxy_backend_active_servers" in text
    prometheus = (cluster["folder"] / "lb" / "prometheus.yml").read_text()
    assert all(f"127.0.0.1:{r['port']}" in prometheus for r in state(cluster)["replicas"])


def test_a_stopped_replica_closes_its_clients_with_a_reason_and_the_rest_go_on(cluster, translator):
    address = cluster["address"]
    lines = LINES[:8]
    results: list[dict | None] = [None] * len(lines)
    opened = [threading.Event() for _ in lines]

    def one(i: int) -> None:
        results[i] = talk(address, lines[i] + " " + lines[i], pace=0.4, opened=opened[i])  # long enough to interrupt

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(lines))]
    for t in threads:
        t.start()
    for event in opened:
        assert event.wait(30)
    time.sleep(0.5)
    victim = state(cluster)["replicas"][0]
    os.kill(victim["pid"], signal.SIGTERM)  # stopped mid-run (a deploy, a scale-down)
    time.sleep(1.0)  # its /health fails; HAProxy marks it down
    late = run_clients(address, LINES[8:12])  # new clients during the outage
    for t in threads:
        t.join(timeout=180)
    closed = [r for r in results if r["code"] == 1001]
    finished = [(line, r) for line, r in zip(lines, results) if r["code"] == 1000]
    assert closed and finished and len(closed) + len(finished) == len(lines)
    for r in closed:
        assert "server shutting down" in r["reason"]
        assert any(m["type"] == "error" and "shutting down" in m["message"] for m in r["messages"])
    for line, r in finished:  # the other replica's streams: untouched, whole
        sentences = [m for m in r["messages"] if m["type"] == "sentence"]  # the line twice: two sentences
        alone = translator.translate(line, "expost", "wait-k", k=3).prediction
        assert [m["translation"] for m in sentences] == [alone, alone]
    for line, r in zip(LINES[8:12], late):  # routed to the live replica
        assert r["code"] == 1000 and translation(r) == translator.translate(line, "expost", "wait-k", k=3).prediction
    # the supervisor starts the stopped replica again, and the balancer takes it back
    wait_for(lambda: state(cluster)["replicas"][0]["restarts"] == 1
             and get(f"http://{address}/replicas/1/health")[0] == 200, what="the replica restarted")
    assert state(cluster)["replicas"][0]["pid"] != victim["pid"]


def test_the_supervisor_stops_everything_on_sigterm(cluster):
    pids = [r["pid"] for r in state(cluster)["replicas"]] + [state(cluster)["balancer"]["pid"]]
    cluster["supervisor"].send_signal(signal.SIGTERM)
    assert cluster["supervisor"].wait(timeout=60) == 0
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
