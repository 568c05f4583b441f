"""Where a P4Runtime install spends its time, on this protobuf stack and, same run, on a baseline one.

Cases, each in a child process of its own (so each starts cold, as a command does):
- `serialize`: a WriteRequest of 20,000 LPM entries built, serialized and parsed (CPU seconds);
- `inproc` k=4, k=8: embedded switches in the controller's own process (as a test runs them): pipeline push,
  routes, one all-host job, a fail-over of the job's root (re-plan and install);
- `served` k=4: one embedded switch process per switch (`python -m softswitch`, as Mininet runs them), same steps;
- `switchload`: what one switch process spends loading p4ina.json: reading the JSON into the program model, the
  compile to IR and C source (Python), the whole load with the C library in the cache (as every switch process but
  the first finds it), and, in a child with an empty cache, the C compiler's own CPU.

Each step is split into its parts: the switches' CPU (the servers' handler threads in process; the switch
processes' CPU from /proc when served), the serialization of the step's own messages (serialize and parse of
every request the controller sent, timed again after the step), the time in Python's cyclic collector in the
controller's process (with the switches in it, theirs too), and the rest (gRPC, the controller's own work).

The baseline: with P4INA_BENCH_BASELINE set to another interpreter (one with protobuf 3.20.3 and p4runtime 1.4.1,
as p4ina had before), every case runs there too, alternating with this one, on this checkout's code: p4proto's
`finsy.proto` is then a stand-in that maps the same names onto the `p4` and `google.rpc` packages. The figures
`p4runtime.ratio.*` are baseline / this, from the same run. The machine may be shared: every case runs ROUNDS
times, the sides alternating, and each figure is the median of its rounds.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.results import Figure, Figures

LOG = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
BASELINE_ENV = "P4INA_BENCH_BASELINE"
CASES = (("serialize", 0), ("switchload", 0), ("inproc", 4), ("inproc", 8), ("served", 4))
ROUNDS = 3
SERIALIZE_ENTRIES = 20_000
START_TIMEOUT = 120.0
CASE_TIMEOUT = 1800.0

# finsy.proto's names on the bindings p4ina used before (p4runtime 1.4.1, googleapis-common-protos): the baseline
# side only, written to a temporary directory put first on its PYTHONPATH
_BASELINE_SHIM = """\
from google.rpc import code_pb2 as rpc_code, status_pb2 as rpc_status
from p4.config.v1 import p4info_pb2 as p4i
from p4.v1 import p4runtime_pb2 as p4r, p4runtime_pb2_grpc as p4r_grpc
"""


# -- the parts of a step ------------------------------------------------------------------
class _Recorder:
    """The requests the controller sends (for the serialization part), and the switches' handler CPU."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.server_cpu = 0.0
        self.c_load = 0.0  # wall seconds in native.cbuild.load: the C compile, or its cached library
        self._lock = threading.Lock()

    def serialization(self) -> float:
        """CPU seconds to serialize every recorded request and parse it back: both ends of the wire."""
        msgs, self.requests = self.requests, []
        t0 = time.process_time()
        for m in msgs:
            type(m).FromString(m.SerializeToString())
        return time.process_time() - t0

    def take_c_load(self) -> float:
        with self._lock:
            t, self.c_load = self.c_load, 0.0
        return t

    def add_c_load(self, t: float) -> None:
        with self._lock:
            self.c_load += t

    def take_server_cpu(self) -> float:
        with self._lock:
            cpu, self.server_cpu = self.server_cpu, 0.0
        return cpu

    def add_server_cpu(self, cpu: float) -> None:
        with self._lock:
            self.server_cpu += cpu


@contextlib.contextmanager
def _instrumented(rec: _Recorder, servers: bool) -> Iterator[None]:
    """Record the client's requests; with servers, the handler threads' CPU (thread_time) of the switches here."""
    from controller import client as C
    from softswitch.p4runtime import server as S

    patched: list[tuple[Any, str, Any]] = []

    def wrap_client(name: str, build: Callable[..., Any]) -> None:
        original = getattr(C.SwitchClient, name)

        def call(self: Any, *args: Any, **kw: Any) -> Any:
            rec.requests.append(build(self, *args, **kw))
            return original(self, *args, **kw)

        patched.append((C.SwitchClient, name, original))
        setattr(C.SwitchClient, name, call)

    pb = C.p4runtime_pb2

    def set_req(self: Any, p4info: Any, device_config: bytes, cookie: int) -> Any:
        req = pb.SetForwardingPipelineConfigRequest(device_id=self.device_id)
        req.config.p4info.CopyFrom(p4info)
        req.config.p4_device_config = device_config
        return req

    wrap_client("set_pipeline", set_req)
    wrap_client("write", lambda self, updates, labels=None: pb.WriteRequest(device_id=1, updates=updates))
    if servers:
        from native import cbuild

        original_load = cbuild.load

        def load(source: str, what: str) -> Any:
            t0 = time.perf_counter()
            try:
                return original_load(source, what)
            finally:
                rec.add_c_load(time.perf_counter() - t0)

        patched.append((cbuild, "load", original_load))
        cbuild.load = load
        for name in ("SetForwardingPipelineConfig", "Write", "Read", "GetForwardingPipelineConfig"):
            original = getattr(S.P4RuntimeServicer, name)

            def handler(self: Any, request: Any, context: Any, _original: Any = original) -> Any:
                t0 = time.thread_time()
                try:
                    out = _original(self, request, context)
                    return out if hasattr(out, "SerializeToString") else iter(list(out))
                finally:
                    rec.add_server_cpu(time.thread_time() - t0)

            patched.append((S.P4RuntimeServicer, name, original))
            setattr(S.P4RuntimeServicer, name, handler)
    try:
        yield
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


class _GcClock:
    """Seconds this process spends in Python's cyclic collector (gc.callbacks), taken per step."""

    def __init__(self) -> None:
        self.total = 0.0
        self._start = 0.0

    def __call__(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._start

    def take(self) -> float:
        t, self.total = self.total, 0.0
        return t


def _proc_cpu(pids: list[int]) -> float:
    """utime + stime of these processes, seconds (/proc/PID/stat fields 14 and 15)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def _steps(topo: Any, tmp: Path, rec: _Recorder, switch_cpu: Callable[[], float]) -> dict[str, float]:
    """Push, routes, one all-host job, the fail-over of its root: per step wall time and its parts."""
    from controller.api import Controller
    from controller.state import State

    out: dict[str, float] = {}
    gc_clock = _GcClock()
    gc.callbacks.append(gc_clock)
    with contextlib.ExitStack() as stack:
        stack.callback(gc.callbacks.remove, gc_clock)
        ctl = stack.enter_context(Controller(topo, state=State(tmp / "state.json"), timeout=120.0))
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("push", ctl.push_pipeline),
            ("routes", ctl.install_routes),
            ("job", lambda: ctl.install_job(1, [h.name for h in topo.hosts])),
        ]
        phases: dict[str, float] = {}
        steps.append(("failover", lambda: ctl.fail_over(1, [ctl.job(1).root], reroute=False, timings=phases)))
        for name, step in steps:
            rec.serialization()  # drop what an earlier step left
            switch_cpu()
            gc_clock.take()
            c0, t0 = time.process_time(), time.perf_counter()
            step()
            out[f"{name}_s"] = time.perf_counter() - t0
            out[f"{name}_controller_cpu_s"] = time.process_time() - c0
            out[f"{name}_switch_cpu_s"] = switch_cpu()
            out[f"{name}_serialization_cpu_s"] = rec.serialization()
            out[f"{name}_c_load_s"] = rec.take_c_load()
            out[f"{name}_gc_s"] = gc_clock.take()  # this process's collector (the switches' too, in process)
        for phase in ("plan", "read_back", "write"):
            out[f"failover_{phase}_s"] = phases.get(phase, 0.0)
        out["switches"] = len(topo.switches)
    return out


# -- the cases -----------------------------------------------------------------------------
def case_serialize() -> dict[str, float]:
    from p4proto import p4runtime_pb2

    t0 = time.process_time()
    req = p4runtime_pb2.WriteRequest(device_id=1)
    for i in range(SERIALIZE_ENTRIES):
        u = req.updates.add(type=p4runtime_pb2.Update.INSERT)
        e = u.entity.table_entry
        e.table_id = 0x02000001
        m = e.match.add(field_id=1)
        m.lpm.value = (0x0A000000 + (i << 8)).to_bytes(4, "big")
        m.lpm.prefix_len = 24
        e.action.action.action_id = 0x01000001
        e.action.action.params.add(param_id=1, value=(i % 64).to_bytes(2, "big"))
    t1 = time.process_time()
    wire = req.SerializeToString()
    t2 = time.process_time()
    back = p4runtime_pb2.WriteRequest.FromString(wire)
    t3 = time.process_time()
    if len(back.updates) != SERIALIZE_ENTRIES:
        raise RuntimeError("the parsed request lost entries")
    return {"build_cpu_s": t1 - t0, "serialize_cpu_s": t2 - t1, "parse_cpu_s": t3 - t2, "total_cpu_s": t3 - t0}


def _load_once() -> dict[str, float]:
    from softswitch.compiler import codegen, program
    from softswitch.runtime.switch import SoftSwitch

    raw = (REPO / "p4" / "build" / "p4ina.json").read_bytes()
    t0 = time.process_time()
    model = program.load(raw)
    t1 = time.process_time()
    codegen.compile_program(model)
    t2, c2 = time.process_time(), os.times()
    SoftSwitch(device_id=1, name="bench").load_program(raw)  # all of it again, as a switch process does
    t3, c3 = time.process_time(), os.times()
    children = (c3.children_user + c3.children_system) - (c2.children_user + c2.children_system)
    return {
        "json_to_model_cpu_s": t1 - t0,
        "compile_cpu_s": t2 - t1,
        "load_cpu_s": t3 - t2,
        "c_compiler_cpu_s": children,
    }


def case_switchload() -> dict[str, float]:
    """One switch's load in this fresh process, the C library cached; then in a child with an empty C cache."""
    warm = _load_once()
    with tempfile.TemporaryDirectory(prefix="p4ina-bench-cache-") as cache:
        done = subprocess.run(
            [sys.executable, "-c", "import json, bench.bench_p4runtime as b; print(json.dumps(b._load_once()))"],
            cwd=REPO,
            env={**os.environ, "P4INA_SOFTSWITCH_CACHE": cache},
            capture_output=True,
            text=True,
            timeout=CASE_TIMEOUT,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the cold load failed:\n{done.stderr[-3000:]}")
    cold = json.loads(done.stdout.strip().splitlines()[-1])
    # the C compiler runs in children of that process (their CPU, once waited for)
    return {**warm, "cold_load_cpu_s": cold["load_cpu_s"], "c_compile_cpu_s": cold["c_compiler_cpu_s"]}


def case_inproc(k: int) -> dict[str, float]:
    from controller.fattree import fat_tree
    from emulation.localnet import embedded_switches

    rec = _Recorder()
    with (
        tempfile.TemporaryDirectory(prefix="p4ina-bench-") as tmp,
        _instrumented(rec, servers=True),  # before the servers start: they bind their handlers then
        embedded_switches(fat_tree(k)) as (topo, _),
    ):
        return _steps(topo, Path(tmp), rec, rec.take_server_cpu)


def case_served(k: int) -> dict[str, float]:
    from controller.fattree import fat_tree

    topo = fat_tree(k)
    rec = _Recorder()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="p4ina-bench-") as tmp:
        try:
            ready = {}
            for s in topo.switches:
                ready[s.name] = Path(tmp) / f"{s.name}.ready"
                cmd = [sys.executable, "-m", "softswitch", "--device-id", str(s.device_id), "--no-p4"]
                cmd += ["--log-level", "warn", "--ready-file", str(ready[s.name]), "--"]
                cmd += ["--grpc-server-addr", "127.0.0.1:0"]
                procs.append(subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL))
            deadline = time.monotonic() + START_TIMEOUT
            while not all(p.exists() for p in ready.values()):
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError("a switch process exited before it listened")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the switch processes did not listen within {START_TIMEOUT:.0f} s")
                time.sleep(0.05)
            addrs = {n: json.loads(p.read_text())["grpc_addr"] for n, p in ready.items()}
            pids = [p.pid for p in procs]
            last = [_proc_cpu(pids)]

            def switch_cpu() -> float:
                now = _proc_cpu(pids)
                delta, last[0] = now - last[0], now
                return delta

            with _instrumented(rec, servers=False):
                return _steps(topo.with_grpc(addrs), Path(tmp), rec, switch_cpu)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def measure(case: str, k: int) -> dict[str, float]:
    from p4proto import backend

    cases = {
        "serialize": case_serialize,
        "switchload": case_switchload,
        "inproc": lambda: case_inproc(k),
        "served": lambda: case_served(k),
    }
    out = cases[case]()
    out["upb"] = 1.0 if backend() == "upb" else 0.0
    return out


# -- both stacks, same run -----------------------------------------------------------------
def _child(python: str, case: str, k: int, shim: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    if shim is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(shim), str(REPO)])
    done = subprocess.run(
        [python, "-m", "bench.bench_p4runtime", case, str(k)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CASE_TIMEOUT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{case} k={k} under {python} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _name(case: str, k: int) -> str:
    return f"{case}.k{k}" if k else case


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def run() -> Figures:
    sides = {"this": sys.executable}
    baseline = os.environ.get(BASELINE_ENV)
    if baseline:
        sides["baseline"] = baseline
    else:
        LOG.warning("%s not set: no baseline side, no ratios", BASELINE_ENV)
    runs: dict[str, dict[str, list[dict[str, float]]]] = {side: {} for side in sides}
    with tempfile.TemporaryDirectory(prefix="p4ina-bench-shim-") as tmp:
        shim = Path(tmp)
        (shim / "finsy" / "proto").mkdir(parents=True)
        (shim / "finsy" / "__init__.py").write_text("")
        (shim / "finsy" / "proto" / "__init__.py").write_text(_BASELINE_SHIM)
        for case, k in CASES:
            for r in range(ROUNDS):
                for side, python in sides.items():  # alternating: the same minutes of the machine for both
                    LOG.info("p4runtime: %s on %s, round %d/%d (%s)", _name(case, k), side, r + 1, ROUNDS, python)
                    got = _child(python, case, k, shim if side == "baseline" else None)
                    runs[side].setdefault(_name(case, k), []).append(got)
    results = {side: {name: _median(rs) for name, rs in cases.items()} for side, cases in runs.items()}
    figs: Figures = {}
    for side, cases in results.items():
        for case_name, m in cases.items():
            note = f"{side}: {'upb' if m.pop('upb') else 'pure-Python'} protobuf, median of {ROUNDS}"
            for key, value in m.items():
                unit = "" if key == "switches" else "s"
                figs[f"p4runtime.{side}.{case_name}.{key}"] = Figure(value, unit, note)
    if "baseline" in results:
        for case_name, m in results["this"].items():
            for key, value in m.items():
                if key.endswith("_s") and value > 0:
                    old = results["baseline"][case_name][key]
                    figs[f"p4runtime.ratio.{case_name}.{key}"] = Figure(old / value, "x", "baseline / this, same run")
    return figs


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
