"""The Mininet network on its own (no P4 program needed): it starts, is wired as the model says, and leaves nothing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from controller.api import Controller
from controller.fattree import fat_tree
from controller.leafspine import leaf_spine
from controller.state import State
from emulation import cleanup
from emulation.network import EmulatedNetwork, NetworkConfig, NetworkError, netem_missing
from emulation.shaping import LinkShape, read_class_config
from tests.common import BACKENDS, our_interfaces

pytestmark = pytest.mark.mininet


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.mark.parametrize("backend", BACKENDS)
def test_fat_tree_k2_starts_wired_as_the_model_and_leaves_nothing(
    backend: str, tmp_path: Path, leak_check: None
) -> None:
    model = fat_tree(2)
    net = EmulatedNetwork(model, NetworkConfig(run_dir=tmp_path, backend=backend, shape=LinkShape(bw_mbps=50)))
    with net:
        topo = net.topology
        assert all(s.grpc_addr and s.grpc_addr.startswith("127.0.0.1:") for s in topo.switches)
        pids = list(net.switch_pids().values())
        assert len(pids) == len(model.switches)
        # every switch port is the root-side interface the model's port number names
        for sw in net.switches:
            ports = {p: i.name for i, p in sw.ports.items() if p > 0}
            assert sorted(ports) == [n.port for n in model.neighbors(sw.name)]
            assert all(name.startswith(f"p4ina{net.tag}-") for name in ports.values())
            for name in ports.values():
                assert Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6").read_text().strip() == "1"
        for h in model.hosts:
            node = net.host(h.name)
            assert f"inet {h.ip}/8" in node.cmd("ip -4 addr show dev " + net.host_iface(h.name))
            assert node.cmd("sysctl -n net.ipv6.conf.all.disable_ipv6").strip() == "1"
            for other in model.hosts:
                if other.name != h.name:
                    assert other.mac in node.cmd(f"ip neigh show {other.ip}")
        tag = net.tag
    assert not any(n.startswith(f"p4ina{tag}-") for n in our_interfaces())
    assert not any(_alive(p) for p in pids)
    assert not (cleanup.RECORD_DIR / f"{tag}.json").exists()


def test_teardown_runs_when_the_body_fails(tmp_path: Path, leak_check: None) -> None:
    net = EmulatedNetwork(leaf_spine(2, 1, 1), NetworkConfig(run_dir=tmp_path, backend="embedded"))
    with pytest.raises(RuntimeError, match="boom"):
        with net:
            pids = list(net.switch_pids().values())
            raise RuntimeError("boom")
    assert not any(_alive(p) for p in pids)
    assert not any(n.startswith(f"p4ina{net.tag}-") for n in our_interfaces())


def test_cleanup_removes_a_killed_run(tmp_path: Path, leak_check: None) -> None:
    """A runner killed with SIGKILL cannot tear down; `p4ina clean` must."""
    ready = tmp_path / "ready"
    # Ctrl-C's own handler, whatever this process inherited: a shell starting a job in the background without
    # job control makes it ignore SIGINT, and Python keeps an inherited SIG_IGN (the network would never stop)
    script = textwrap.dedent(f"""
        import signal
        import time
        from pathlib import Path
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from controller.leafspine import leaf_spine
        from emulation.network import EmulatedNetwork, NetworkConfig, NetworkError, netem_missing
        config = NetworkConfig(run_dir=Path({str(tmp_path)!r}), backend="embedded")
        net = EmulatedNetwork(leaf_spine(2, 1, 1), config).start()
        pids = [str(p) for p in net.switch_pids().values()]
        Path({str(ready)!r}).write_text(net.tag + " " + " ".join(pids))
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2])
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert ready.exists(), "the network did not start"
        tag, *pids = ready.read_text().split()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert any(n.startswith(f"p4ina{tag}-") for n in our_interfaces())
        done = subprocess.run(
            [sys.executable, "-m", "p4ina", "clean", "--json"], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert tag in done.stdout
        assert not any(n.startswith(f"p4ina{tag}-") for n in our_interfaces())
        deadline = time.monotonic() + 10
        while any(_alive(int(p)) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(int(p)) for p in pids)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_ctrl_c_tears_the_network_down(tmp_path: Path, leak_check: None) -> None:
    ready = tmp_path / "ready"
    # Ctrl-C's own handler, whatever this process inherited: a shell starting a job in the background without
    # job control makes it ignore SIGINT, and Python keeps an inherited SIG_IGN (the network would never stop)
    script = textwrap.dedent(f"""
        import signal
        import time
        from pathlib import Path
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from controller.leafspine import leaf_spine
        from emulation.network import EmulatedNetwork, NetworkConfig, NetworkError, netem_missing
        config = NetworkConfig(run_dir=Path({str(tmp_path)!r}), backend="embedded")
        with EmulatedNetwork(leaf_spine(2, 1, 1), config) as net:
            pids = [str(p) for p in net.switch_pids().values()]
            Path({str(ready)!r}).write_text(net.tag + " " + " ".join(pids))
            time.sleep(600)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2], stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert ready.exists(), "the network did not start"
        tag, *pids = ready.read_text().split()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
        assert "KeyboardInterrupt" in err
        assert not any(n.startswith(f"p4ina{tag}-") for n in our_interfaces())
        assert not any(_alive(int(p)) for p in pids)
        assert not (cleanup.RECORD_DIR / f"{tag}.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_delay_and_loss_use_netem_or_are_refused_by_name(tmp_path: Path, leak_check: None) -> None:
    """Mininet skips a netem qdisc the kernel lacks without a word; we must not report a lossless run as lossy.
    Without netem, the embedded switches hold the delay and a BPF filter drops; BMv2 has no delay stage."""
    shape = LinkShape(bw_mbps=10, delay_ms=1, loss_pct=1)
    if netem_missing():
        bmv2 = EmulatedNetwork(leaf_spine(1, 1, 1), NetworkConfig(run_dir=tmp_path / "b", backend="bmv2", shape=shape))
        try:
            with pytest.raises(NetworkError, match="netem"):
                bmv2.start()
        finally:
            bmv2.stop()
    with EmulatedNetwork(leaf_spine(1, 1, 1), NetworkConfig(run_dir=tmp_path, backend="embedded", shape=shape)) as net:
        qdiscs = net.host("h1").cmd("tc qdisc show dev " + net.host_iface("h1"))
        if netem_missing():
            assert "netem" not in qdiscs
            cmd = " ".join(net.switches[0].command())
            assert "--egress-delay 1=1" in cmd and "--ingress-delay 1=1" in cmd, cmd
        else:
            assert "netem" in qdiscs


def test_loss_without_netem_drops_on_both_ends_of_every_link(tmp_path: Path, leak_check: None) -> None:
    """Where netem is missing, --loss is a tc BPF filter on each link end; pings get lost at the expected rate."""
    shape = LinkShape(bw_mbps=10, loss_pct=20)
    with EmulatedNetwork(leaf_spine(1, 1, 2), NetworkConfig(run_dir=tmp_path, backend="embedded", shape=shape)) as net:
        h1 = net.host("h1")
        qdiscs = h1.cmd("tc filter show dev " + net.host_iface("h1") + " egress")
        assert ("bpf" in qdiscs) != (netem_missing() is None), qdiscs
        with Controller(net.topology, state=State(tmp_path / "state.json")) as ctl:
            ctl.push_pipeline()
            ctl.install_routes()
        h2 = net.topology.host("h2")
        out, err, _ = h1.pexec(["ping", "-c", "60", "-i", "0.02", "-W", "1", "-q", h2.ip])
        got = re.search(r"(\d+) received", out)
        assert got, f"no ping summary: {out} {err}"
        received = int(got.group(1))
        # h1 -> leaf -> h2 and back crosses 4 lossy link ends: 0.8^4 = 41% of 60 pings (24.6, sd 3.8) come back.
        assert 8 <= received <= 45, f"expected about 25 of 60 pings back: {out}"


def test_links_are_shaped_with_a_one_frame_burst_and_counted(tmp_path: Path, leak_check: None) -> None:
    """HTB at the link rate with burst = cburst = one frame on both ends (no hidden credit), and the byte
    counters the bound is computed from see what crossed each link, both directions."""
    shape = LinkShape(bw_mbps=2)
    with EmulatedNetwork(leaf_spine(1, 1, 2), NetworkConfig(run_dir=tmp_path, backend="embedded", shape=shape)) as net:
        h1 = net.host("h1")
        for show in (
            h1.cmd("tc class show dev " + net.host_iface("h1")),
            subprocess.run(
                ["tc", "class", "show", "dev", sorted(net.link_ports())[0]], capture_output=True, text=True
            ).stdout,
        ):
            cls = read_class_config(show)
            assert cls["rate"] == "2Mbit" and cls["ceil"] == "2Mbit", show
            burst = int(cls["burst"].rstrip("b"))  # tc keeps the burst as a time at the rate: read back rounded
            assert cls["burst"] == cls["cburst"] and abs(burst - 1514) <= 15, show
        report = net.shaping_report()
        assert report["burst_bytes"] == 1514 and report["tc_class"]["burst"] == cls["burst"]
        with Controller(net.topology, state=State(tmp_path / "state.json")) as ctl:
            ctl.push_pipeline()
            ctl.install_routes()
        before = net.link_bytes()
        h2 = net.topology.host("h2")
        out, err, code = h1.pexec(
            [
                "python3",
                "-c",
                (
                    "import socket,time\n"
                    "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
                    f"[s.sendto(bytes(1000),('{h2.ip}',9)) or time.sleep(0.0001) for _ in range(200)]\n"
                ),
            ]
        )
        assert code == 0, err
        time.sleep(1.2)
        after = net.link_bytes()
        ports = net.link_ports()
        rx_from_h1 = sum(after[i][1] - before[i][1] for i, (_sw, _p, peer) in ports.items() if peer == "h1")
        tx_to_h2 = sum(after[i][0] - before[i][0] for i, (_sw, _p, peer) in ports.items() if peer == "h2")
        frame = 1000 + 8 + 20 + 14
        assert 200 * frame <= rx_from_h1 <= 200 * frame + 2000, rx_from_h1
        assert 200 * frame <= tx_to_h2 <= 200 * frame + 2000, tx_to_h2
