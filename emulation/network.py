"""An emulated p4ina network: Mininet hosts and links, P4 switch processes, and a teardown that always runs.

    with EmulatedNetwork(fat_tree(4), NetworkConfig(run_dir=Path("runs/x"))) as net:
        topo = net.topology          # the model with each switch's grpc_addr filled in
        net.popen("h1", ["python", "-m", "hosts", ...])

Hosts are quiet: IPv6 is off in their namespaces before any link exists, and
on the switches' root-side ports before the switches start; ARP is static
(the switches drop ARP); transmit checksum offload is off, so UDP checksums
are real when a frame leaves through a switch's raw socket. A run record
(see emulation.cleanup) lists every process started, so `make clean-net`
can undo a run that was killed before its own teardown.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.topology import Topology, link_key
from emulation import cleanup
from emulation.commands import NetnsError, interface_counters, sh
from emulation.impairments import (
    add_random_loss,
    set_blackhole,
    set_bpf_dup,
    set_bpf_loss,
    set_reorder,
    tc_counts,
)
from emulation.mininet_compat import Host, Link, Mininet, setLogLevel
from emulation.nodes import (
    BACKENDS,
    IFACE_PREFIX,
    SWITCH_CLASSES,
    P4Switch,
    default_backend,
    port_iface,
    stop_process,
    wait_ready,
)
from emulation.shaping import LinkShape
from emulation.topo import ModelTopo

LOG = logging.getLogger(__name__)


class NetworkError(RuntimeError):
    """The network could not be built or started; the message says which part."""


@dataclass(frozen=True)
class NetworkConfig:
    run_dir: Path
    backend: str = field(default_factory=default_backend)
    shape: LinkShape = LinkShape()
    switch_log_level: str = "warn"
    ready_timeout_s: float = 180.0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise NetworkError(f"switch back end {self.backend!r}: choose one of {', '.join(BACKENDS)}")


class QuietHost(Host):
    """A Mininet host whose namespace never enables IPv6 (no DAD, router or MLD chatter to count)."""

    def __init__(self, name: str, **params: Any) -> None:
        super().__init__(name, **params)
        self.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")


class EmulatedNetwork:
    def __init__(self, model: Topology, config: NetworkConfig) -> None:
        self.model = model
        self.config = config
        self.net: Mininet | None = None
        self.record: cleanup.RunRecord | None = None
        self.tag = ""
        self._procs: list[subprocess.Popen[Any]] = []
        self._stopped = False
        self._bpf_loss = False
        self._switch_delay = False
        self._loss_sinks: list[str] = []
        self._runtime_loss = False  # set_loss made its sinks and filters
        self._reorder_split = False  # set_dup_reorder split every link's HTB class (reordering on)
        self._link_names: list[str] = []
        self.startup_s: float | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> EmulatedNetwork:
        if os.geteuid() != 0:
            raise NetworkError("the emulation needs root (Mininet creates namespaces and links)")
        t0 = time.monotonic()
        self._bpf_loss = False
        self._switch_delay = False
        if self.config.shape.delay_ms or self.config.shape.loss_pct:
            why = netem_missing()
            if why and self.config.shape.delay_ms:
                if self.config.backend != "embedded":
                    raise NetworkError(
                        f"link delay needs tc's netem qdisc, which this kernel lacks ({why}), or the "
                        "embedded switch's delay stage: run with --switch embedded, or without --delay"
                    )
                # Without netem, the embedded switches hold frames for the links' delay (softswitch.delayline).
                self._switch_delay = True
            # Without netem, loss comes from a tc BPF filter on both ends of every link instead.
            self._bpf_loss = bool(why) and bool(self.config.shape.loss_pct)
        self.config.run_dir.mkdir(parents=True, exist_ok=True)
        self.tag = cleanup.new_tag()
        self.record = cleanup.RunRecord(self.tag, cleanup.this_process(), str(self.config.run_dir))
        self.record.save()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _start(self) -> None:
        assert self.record is not None
        cls = SWITCH_CLASSES[self.config.backend]
        opts = {"run_dir": str(self.config.run_dir), "tag": self.tag, "log_level": self.config.switch_log_level}
        if self._switch_delay:
            opts["delay_ms"] = float(self.config.shape.delay_ms or 0.0)
        # Mininet reports tc's harmless HTB quantum warnings as errors; its real failures raise or show in our checks.
        setLogLevel(os.environ.get("P4INA_MININET_LOG", "critical"))
        tag = self.tag
        topo = ModelTopo(self.model, cls, opts, lambda sw, dev, port: port_iface(tag, sw, dev, port))
        self.net = Mininet(
            topo=topo,
            host=QuietHost,
            link=Link,
            controller=None,
            build=False,
            autoSetMacs=False,
            autoStaticArp=False,
            waitConnected=False,
        )
        try:
            self.net.build()
        finally:  # whatever was made before a failure is recorded, so a crash leaves nothing unknown
            self._record_nodes()
        for sw in self.switches:
            for intf in sw.intfList():
                if intf.name != "lo":
                    _disable_ipv6_root(intf.name)
        for host in self.net.hosts:
            intf = host.defaultIntf()
            host.cmd(f"ethtool -K {intf.name} tx off >/dev/null 2>&1")
        self._shape_links()
        if self._bpf_loss:
            self._random_loss(self.config.shape.loss_pct / 100.0)
        self._static_arp()
        self._link_names = sorted(self.link_ports())
        LOG.info("starting %d %s switches", len(self.switches), self.config.backend)
        self.net.start()
        for sw in self.switches:
            if sw.proc is not None:
                self.record.add(cleanup.Proc(sw.proc.pid, cleanup.start_time(sw.proc.pid) or 0, f"switch {sw.name}"))
        self.record.save()
        took = wait_ready(self.switches, self.config.ready_timeout_s)
        LOG.info("%d switches ready in %.1f s", len(self.switches), took)

    def _runner(self, node: Any) -> Any:
        """run(*cmd) in the namespace of an interface's node (switch ports are in the root namespace)."""
        if node not in self.net.hosts:
            return sh

        def run(*cmd: str) -> str:
            out, err, code = node.pexec(list(cmd))
            if code:
                raise NetnsError(f"{node.name}: {' '.join(cmd)}: {err.strip() or out.strip()}")
            return out

        return run

    def _shape_links(self) -> None:
        """Rate (HTB, one-frame burst), and netem delay/loss where the kernel has netem, on both ends of every link."""
        shape = self.config.shape
        shaping = shape.shaping()
        netem: list[str] = []
        if shape.delay_ms and not self._switch_delay:
            netem += ["delay", f"{shape.delay_ms}ms"]
        if shape.loss_pct and not self._bpf_loss:
            netem += ["loss", f"{shape.loss_pct}%"]
        if shaping is None and not netem:
            return
        for link in self.net.links:
            for intf in (link.intf1, link.intf2):
                run = self._runner(intf.node)
                if shaping is not None:
                    shaping.apply(run, intf.name)
                if netem:
                    parent = ["parent", "5:1", "handle", "10:"] if shaping is not None else ["root", "handle", "10:"]
                    verb = "replace" if shaping is not None else "add"
                    run(
                        "tc",
                        "qdisc",
                        verb,
                        "dev",
                        intf.name,
                        *parent,
                        "netem",
                        *netem,
                        "limit",
                        str(shape.max_queue or 1000),
                    )
        LOG.info(
            "links shaped: %s Mbit/s (HTB, one-frame burst)%s",
            shape.bw_mbps or "unlimited",
            f", netem {' '.join(netem)}" if netem else "",
        )

    def shaping_report(self) -> dict[str, Any]:
        """What tc says one link is shaped to (as applied, read back), for the results' config."""
        shaping = self.config.shape.shaping()
        out: dict[str, Any] = {
            "rate_bps": shaping.rate_bps if shaping else None,
            "burst_bytes": shaping.burst_bytes if shaping else None,
        }
        if shaping and self._link_names:
            from emulation.shaping import read_class_config

            dev = self._link_names[0]
            out["tc_class"] = {"dev": dev, **read_class_config(sh("tc", "class", "show", "dev", dev))}
        return out

    def link_ports(self) -> dict[str, tuple[str, int, str]]:
        """Every switch interface (root namespace) -> (switch, port, the node at the other end)."""
        out = {}
        for link in self.net.links:
            for mine, other in ((link.intf1, link.intf2), (link.intf2, link.intf1)):
                if mine.node in self.switches:
                    port = mine.node.ports.get(mine)
                    out[mine.name] = (mine.node.name, int(port) if port is not None else -1, other.node.name)
        return out

    def link_bytes(self) -> dict[str, tuple[int, int]]:
        """Bytes each switch interface sent and received so far: (to the neighbour, from the neighbour).

        Together they give both directions of every link (every link has a switch end), as the
        frames were on the wire: Ethernet header and payload, what the shapers let through.
        """
        return self._counters("bytes")

    def link_frames(self) -> dict[str, tuple[int, int]]:
        """Frames each switch interface sent and received so far (as link_bytes, in frames): with the kernel's
        CPU time they give its cost per frame on the wire, which sets the link rate the machine can emulate."""
        return self._counters("packets")

    def _counters(self, unit: str) -> dict[str, tuple[int, int]]:
        """(tx_<unit>, rx_<unit>) of every switch interface that still exists."""
        return interface_counters(self._link_names, unit)

    def _random_loss(self, fraction: float) -> None:
        """Loss on both ends of every link where netem is missing (emulation.netns.add_random_loss)."""
        for i, link in enumerate(self.net.links):
            for j, intf in enumerate((link.intf1, link.intf2)):
                run = self._runner(intf.node)
                sink = f"{IFACE_PREFIX}{self.tag}-L{i}{j}"
                if run is sh:
                    self._loss_sinks.append(sink)
                add_random_loss(run, intf.name, fraction, sink=sink)
        LOG.info(
            "%.2f%% random loss on both ends of %d links (tc BPF filter; this kernel has no netem)",
            fraction * 100,
            len(self.net.links),
        )

    def set_loss(self, fraction: float) -> None:
        """Random loss on both ends of every link from now on (0: none), while traffic flows (a loss sweep).

        Always the tc BPF filter, beside whatever the network was started with (start it without --loss).
        """
        assert self.net is not None
        if self._bpf_loss or self.config.shape.loss_pct:
            raise NetworkError("set_loss needs a network started without loss (--loss adds its own filters)")
        for i, link in enumerate(self.net.links):
            for j, intf in enumerate((link.intf1, link.intf2)):
                run = self._runner(intf.node)
                sink = f"{IFACE_PREFIX}{self.tag}-R{i}{j}"
                if not self._runtime_loss and run is sh:
                    self._loss_sinks.append(sink)
                set_bpf_loss(run, intf.name, fraction, sink, fresh=not self._runtime_loss)
        self._runtime_loss = True
        LOG.info("%.2f%% random loss on both ends of %d links", fraction * 100, len(self.net.links))

    def _link_ends(self) -> Iterator[tuple[Any, str]]:
        assert self.net is not None
        for link in self.net.links:
            for intf in (link.intf1, link.intf2):
                yield self._runner(intf.node), intf.name

    def set_dup_reorder(self, dup: float, reorder: float) -> None:
        """From now on, on both ends of every link: copy `dup` of the packets (the copy right behind the
        original) and hold `reorder` of them back behind later ones (0, 0: neither), while traffic flows.

        tc BPF filters, no netem (emulation.netns.set_bpf_dup, set_reorder); needs shaped links (--bw: the
        held-back packets wait in a second HTB class) and a network started without --loss.
        """
        assert self.net is not None
        shaping = self.config.shape.shaping()
        if shaping is None:
            raise NetworkError(
                "duplication and reordering need shaped links (a bandwidth): the held-back packets "
                "wait in a second HTB class of each link"
            )
        for name, value in (("duplication", dup), ("reorder", reorder)):
            if not 0.0 <= value < 1.0:
                raise NetworkError(f"{name} fraction {value}: need 0 <= fraction < 1")
        if not self._runtime_loss:
            self.set_loss(0.0)  # the clsact hooks (and loss sinks) on every link end, no loss
        split = self._reorder_split
        for run, dev in self._link_ends():
            set_bpf_dup(run, dev, dup)
            split = set_reorder(run, dev, reorder, shaping.rate_bps, shaping.queue_pkts, split=self._reorder_split)
        self._reorder_split = split  # 0 puts every link's HTB class back as it was
        LOG.info(
            "%.2f%% duplicated, %.2f%% held back on both ends of %d links",
            dup * 100,
            reorder * 100,
            len(self.net.links),
        )

    def dup_reorder_counts(self) -> dict[str, int]:
        """Packets copied and held back on all link ends so far (tc's counters; zero before set_dup_reorder)."""
        out = {"duplicated": 0, "held": 0}
        if self.net is None or not self._runtime_loss:
            return out
        for run, dev in self._link_ends():
            for k, v in tc_counts(run, dev).items():
                out[k] += v
        return out

    def _switch_link(self, a: str, b: str) -> Any:
        assert self.net is not None
        names = {a, b}
        for link in self.net.links:
            ends = {link.intf1.node.name, link.intf2.node.name}
            if ends == names and link.intf1.node in self.switches and link.intf2.node in self.switches:
                return link
        raise NetworkError(f"no switch-to-switch link between {a!r} and {b!r}")

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Take the link between switches a and b down (both ends, as a cut cable: each loses its carrier) or
        bring it back up; the switch processes keep running."""
        link = self._switch_link(a, b)
        for intf in (link.intf1, link.intf2):
            sh("ip", "link", "set", "dev", intf.name, "up" if up else "down")
        LOG.info("link %s-%s %s", a, b, "up" if up else "down")

    def ready_impairments(self) -> None:
        """The clsact hooks and loss sinks on every link end, no loss: a later set_gray_* is a filter each end."""
        if not self._runtime_loss:
            self.set_loss(0.0)

    def _blackhole(self, where: Iterable[tuple[int, int, str]], on: bool) -> None:
        """(link index, end, hook) of link ends whose frames vanish (on) or pass again; the loss hooks first."""
        assert self.net is not None
        self.ready_impairments()
        for i, j, hook in where:
            link = self.net.links[i]
            intf = (link.intf1, link.intf2)[j]
            set_blackhole(self._runner(intf.node), intf.name, hook, on, f"{IFACE_PREFIX}{self.tag}-R{i}{j}")

    def set_gray_link(self, a: str, b: str, on: bool) -> None:
        """A gray link: every frame switch a sends to switch b vanishes (on), the other direction and both
        carriers untouched, nothing reported; or the link heals (off)."""
        link = self._switch_link(a, b)
        i = self.net.links.index(link) if self.net is not None else 0
        j = 0 if link.intf1.node.name == a else 1
        self._blackhole([(i, j, "egress")], on)
        LOG.info("link %s->%s %s", a, b, "drops every frame (gray)" if on else "healed")

    def set_gray_switch(self, name: str, on: bool) -> None:
        """A gray switch: its process runs and answers P4Runtime, its ports keep their carrier, and every frame
        that arrives on them vanishes (on), as a switch whose pipeline drops the job's packets; or it heals."""
        assert self.net is not None
        # at the far end of each of its links, on the way out: a switch reading its ports with packet sockets sees
        # a frame before tc's ingress hook could drop it
        ends = [
            (i, 1 - j, "egress")
            for i, link in enumerate(self.net.links)
            for j, intf in enumerate((link.intf1, link.intf2))
            if intf.node.name == name
        ]
        if not ends:
            raise NetworkError(f"no switch named {name!r} with links")
        self._blackhole(ends, on)
        LOG.info("switch %s %s", name, "drops every frame it receives (gray)" if on else "healed")

    def down_links(self, switches: Sequence[str] | None = None) -> set[tuple[str, str]]:
        """Switch-to-switch links (of these switches, or all) whose interface at either end has no carrier: the
        port status a switch reports (the kernel's view of the emulated cable; P4Runtime has no port status)."""
        assert self.net is not None
        want = set(switches) if switches is not None else None
        out: set[tuple[str, str]] = set()
        for link in self.net.links:
            ends = (link.intf1, link.intf2)
            if not all(i.node in self.switches for i in ends):
                continue
            a, b = (i.node.name for i in ends)
            if want is not None and a not in want and b not in want:
                continue
            for intf in ends:
                try:
                    carrier = (Path("/sys/class/net") / intf.name / "carrier").read_text().strip()
                except OSError:  # an interface that is down (or gone) cannot report a carrier
                    carrier = "0"
                if carrier != "1":
                    out.add(link_key(a, b))
                    break
        return out

    def kill_switch(self, name: str) -> int:
        """SIGKILL one switch process (a switch failure); returns its PID. Teardown skips it."""
        for sw in self.switches:
            if sw.name == name and sw.proc is not None:
                sw.proc.kill()
                sw.proc.wait(10)
                return sw.proc.pid
        raise NetworkError(f"no running switch named {name!r}")

    def restart_switch(self, name: str) -> None:
        """Start a killed switch again on the same P4Runtime address, with empty tables and no program (a
        repaired switch: the controller pushes the pipeline and its entries again). Embedded switches only."""
        sw = next((s for s in self.switches if s.name == name), None)
        if sw is None:
            raise NetworkError(f"no switch named {name!r}")
        if sw.backend != "embedded":
            raise NetworkError(f"{name}: only an embedded switch restarts on its own address")
        if sw.proc is not None and sw.proc.poll() is None:
            raise NetworkError(f"{name} is still running (kill_switch first)")
        sw.start([])
        if self.record is not None and sw.proc is not None:  # `p4ina clean` stops it too
            self.record.add(cleanup.Proc(sw.proc.pid, cleanup.start_time(sw.proc.pid) or 0, f"switch {sw.name}"))
            self.record.save()
        wait_ready([sw], self.config.ready_timeout_s)
        LOG.info("switch %s restarted on %s", name, sw.grpc_addr)

    def _record_nodes(self) -> None:
        assert self.record is not None and self.net is not None
        for node in self.net.hosts + self.net.switches:
            pid = getattr(node, "pid", None)
            if pid:
                ino = cleanup.netns_inode(pid) if node in self.net.hosts else None
                self.record.add(cleanup.Proc(pid, cleanup.start_time(pid) or 0, f"shell {node.name}", ino))
        self.record.save()

    def _static_arp(self) -> None:
        assert self.net is not None
        for h in self.model.hosts:
            node = self.net.get(h.name)
            intf = node.defaultIntf().name
            entries = [
                f"ip neigh replace {o.ip} lladdr {o.mac} dev {intf} nud permanent"
                for o in self.model.hosts
                if o.name != h.name
            ]
            if entries:
                out = node.cmd(" && ".join(entries) + " && echo ok")
                if "ok" not in out:
                    raise NetworkError(f"static ARP on {h.name} failed: {out.strip()}")

    def stop(self) -> None:
        """Stop workers, switches, links and hosts; safe to call twice, and against a second Ctrl-C."""
        if self._stopped:
            return
        self._stopped = True
        with _sigint_deferred():
            for proc in self._procs:
                stop_process(proc, grace_s=2.0)
            if self.net is not None:
                self._stop_switches()  # before Mininet deletes the links under them
                try:
                    self.net.stop()
                except Exception:  # keep going: the sweep below removes what Mininet could not
                    LOG.exception("Mininet's stop failed; removing the rest by hand")
            for sink in self._loss_sinks:  # ours, in the root namespace; Mininet does not know them
                subprocess.run(["ip", "link", "del", sink], capture_output=True)
            report = cleanup.CleanupReport()
            if self.record is not None:
                cleanup.clean_record(self.record, report)  # anything still alive in our namespaces
                cleanup.delete_interfaces({self.tag}, set(), report)
            if report.processes or report.interfaces:
                LOG.warning(
                    "teardown removed %d leftover process(es) and interfaces %s", report.processes, report.interfaces
                )

    def _stop_switches(self, grace_s: float = 5.0) -> None:
        """SIGTERM every switch process at once, then wait (and SIGKILL the stubborn), by PID."""
        procs = [s.proc for s in self.switches if s.proc is not None and s.proc.poll() is None]
        for proc in procs:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stop_process(proc, grace_s=0.1)

    def __enter__(self) -> EmulatedNetwork:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- access ------------------------------------------------------------------------------
    @property
    def switches(self) -> list[P4Switch]:
        assert self.net is not None
        return [s for s in self.net.switches if isinstance(s, P4Switch)]

    @property
    def topology(self) -> Topology:
        """The model with each switch's P4Runtime address, for the controller."""
        return self.model.with_grpc({s.name: s.grpc_addr for s in self.switches})

    def host(self, name: str) -> Host:
        assert self.net is not None
        return self.net.get(name)

    def host_iface(self, name: str) -> str:
        return self.host(name).defaultIntf().name

    def popen(self, host: str, cmd: Sequence[str], log: Path | None = None, **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a process inside a host's namespace; it is stopped at teardown if still running."""
        node = self.host(host)
        out: Any = open(log, "wb") if log is not None else subprocess.DEVNULL
        try:
            proc = node.popen(list(cmd), stdout=subprocess.PIPE, stderr=out, stdin=subprocess.DEVNULL, **kwargs)
        finally:
            if log is not None:
                out.close()
        self._procs.append(proc)
        self._procs = [p for p in self._procs if p.poll() is None or p is proc]
        return proc

    def switch_cpu_seconds(self) -> dict[str, float]:
        return {s.name: cpu for s in self.switches if (cpu := s.cpu_seconds()) is not None}

    def switch_pids(self) -> dict[str, int]:
        return {s.name: s.proc.pid for s in self.switches if s.proc is not None}


def netem_missing() -> str | None:
    """None when a netem qdisc can be attached here, else tc's complaint (Mininet would silently skip it)."""
    ns = f"p4ina-netem-{os.getpid()}"
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
        subprocess.run(
            ["ip", "-n", ns, "link", "add", "p4ina-probe0", "type", "veth", "peer", "name", "p4ina-probe1"],
            check=True,
            capture_output=True,
        )
        done = subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "p4ina-probe0", "root", "netem", "delay", "1ms"],
            capture_output=True,
            text=True,
        )
        return None if done.returncode == 0 else (done.stderr.strip() or f"tc exited with {done.returncode}")
    except subprocess.CalledProcessError as ex:
        return f"cannot probe: {ex.stderr.decode(errors='replace').strip() if ex.stderr else ex}"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _disable_ipv6_root(iface: str) -> None:
    path = Path(f"/proc/sys/net/ipv6/conf/{iface}/disable_ipv6")
    if path.exists():
        path.write_text("1")


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C until the teardown is done (then re-raise it), so a second one cannot leave debris."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, _frame: got.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if got:
        raise KeyboardInterrupt


@contextlib.contextmanager
def running(model: Topology, config: NetworkConfig) -> Iterator[EmulatedNetwork]:
    net = EmulatedNetwork(model, config)
    try:
        yield net.start()
    finally:
        net.stop()
