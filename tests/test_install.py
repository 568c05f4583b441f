"""`pip install .` (not editable) gives a working p4ina: the command, the switch on its C engine, the agents' C loop.

A copy of the source tree (the working tree without .git, the venv, build output and the tests) is installed with
`pip install --no-deps --no-build-isolation --no-index` into a new venv in a temporary directory. A copy, not the
checkout itself: a non-editable build writes build/ and an .egg-info into the tree it builds, and setuptools
never empties build/lib, so a module removed from the checkout would still ship from an old build there.

Nothing is downloaded: the new venv gets the dependencies from the site-packages of the interpreter running the
tests (the project venv, where `make setup` installed them) through a .pth file, as plain path entries, so that
the .pth files there (the editable install's finder among them) are not run and nothing of the checkout can be
imported. Building needs setuptools >= 77 there (`make setup` installs it). Everything then runs from a directory
outside the checkout with `python -I`, and each check first asserts that the modules come from the new venv.

The C is compiled into a fresh user cache directory (XDG_CACHE_HOME in the temporary directory): the installed
package directory is never written (checked), the compiled libraries are found in the cache (checked).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

from native import cbuild

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("p4proto", "wireformat", "native", "controller", "hosts", "softswitch", "emulation", "experiments")
PACKAGES += ("simulation", "bench", "p4ina")
SETUPTOOLS_MIN = 77  # pyproject.toml's build requirement (`license` as an SPDX expression)
# not part of what is built: the repository's own data, the venv, build output and caches (the tests are skipped
# too: they are not installed, and leaving them out keeps the copy small)
SKIP_TOP = {".git", ".venv", ".venv-shell", "build", "results", "state", "tests", "notebooks", "docs", ".ci"}
SKIP_ANY = {"__pycache__", ".pytest_cache", ".hypothesis", ".ipynb_checkpoints"}
# variables that could point the new venv's Python or the C caches elsewhere
DROP_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")
DROP_ENV += ("P4INA_SOFTSWITCH_CACHE", "P4INA_SOFTSWITCH_ENGINE", "P4INA_INC_STREAM", "P4INA_JSON")


@dataclass(frozen=True)
class Installed:
    python: Path  # the new venv's interpreter
    bin: Path
    site: Path  # the new venv's site-packages, where p4ina is installed
    cwd: Path  # outside the checkout
    cache: Path  # XDG_CACHE_HOME of every command
    env: dict[str, str]

    def run(self, args: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout)

    def script(self, source: str, timeout: float = 240) -> dict:
        """Run Python source in the new venv (isolated: no cwd, no PYTHON* variables), return its last line's JSON."""
        done = self.run([str(self.python), "-I", "-c", source], timeout)
        assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
        return json.loads(done.stdout.strip().splitlines()[-1])

    def package_files(self) -> set[str]:
        """The installed packages' files (not the byte code Python writes beside them)."""
        return {
            str(p.relative_to(self.site))
            for name in PACKAGES
            for p in (self.site / name).rglob("*")
            if "__pycache__" not in p.parts
        }


def _ignore(directory: str, names: list[str]) -> set[str]:
    top = Path(directory).resolve() == REPO
    return {n for n in names if n in SKIP_ANY or n.endswith(".egg-info") or (top and n in SKIP_TOP)}


def _dependency_dirs() -> list[str]:
    """The site-packages directories of this interpreter, in its order (the project venv's before the system's)."""
    return [p for p in sys.path if p and Path(p).is_dir() and Path(p).name in ("site-packages", "dist-packages")]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    if importlib.util.find_spec("venv") is None:
        pytest.skip("the venv module is not available (Debian: apt-get install python3-venv)")
    if importlib.util.find_spec("pip") is None:
        pytest.skip("pip is not importable by the interpreter running the tests")
    try:
        setuptools = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        setuptools = "0"
    assert int(setuptools.split(".")[0]) >= SETUPTOOLS_MIN, (
        f"setuptools {setuptools} cannot build p4ina (needs >= {SETUPTOOLS_MIN}); `make setup` installs it"
    )
    tmp = tmp_path_factory.mktemp("install")
    assert REPO not in tmp.resolve().parents, f"{tmp} is inside the checkout"
    src, venv, cwd, cache = tmp / "src", tmp / "venv", tmp / "elsewhere", tmp / "cache"
    shutil.copytree(REPO, src, ignore=_ignore, symlinks=True)
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env.update(XDG_CACHE_HOME=str(cache), PIP_CONFIG_FILE=os.devnull, PIP_NO_INPUT="1")

    base = getattr(sys, "_base_executable", sys.executable)
    made = subprocess.run(
        [base, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot create a venv with {base}: {made.stderr.strip()[-500:]}")
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    site = Path(purelib)
    assert venv in site.parents, site
    (site / "p4ina-test-dependencies.pth").write_text("".join(f"{d}\n" for d in _dependency_dirs()))

    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
        + ["--no-build-isolation", "--no-index", "--ignore-installed", str(src)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"pip install failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    return Installed(python, venv / "bin", site, cwd, cache, env)


IMPORTED_FROM = """
import json, importlib
mods = ["softswitch", "controller.api", "hosts.native_stream", "native.cbuild", "wireformat", "p4ina.cli"]
where = {m: importlib.import_module(m).__file__ for m in mods}
"""


def _assert_from_venv(inst: Installed, where: dict[str, str]) -> None:
    for module, file in where.items():
        assert inst.site in Path(file).parents, f"{module} imported from {file}, not from the new venv"
        assert REPO not in Path(file).resolve().parents, f"{module} imported from the checkout"


def _require_cc() -> None:
    if cbuild.toolchain() is None:
        pytest.skip("[cc] no C compiler (cc) on PATH: no C engine and no C stream loop to build")


def test_command_and_shipped_program(installed: Installed) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    p4ina = installed.bin / "p4ina"
    assert p4ina.is_file(), "pip installed no p4ina command"
    shown = installed.run([str(p4ina), "--version"])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"p4ina {version}"
    helped = installed.run([str(p4ina), "--help"])
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: p4ina VERB")
    for verb in ("emulate", "simulate", "switch", "host", "pipeline", "job", "bench"):
        assert f"\n  {verb} " in helped.stdout, f"{verb} missing from p4ina --help"
    switch_help = installed.run([str(installed.bin / "p4ina-switch"), "--help"])
    assert switch_help.returncode == 0 and "--grpc-server-addr" in switch_help.stdout, switch_help.stderr

    out = installed.script(
        IMPORTED_FROM
        + """
import hashlib
from controller import api
from experiments.config import ExperimentConfig
from experiments.harness import environment
from bench.results import RESULTS
from simulation.nccl_anchors import check as nccl_check
env = environment(ExperimentConfig())
print(json.dumps({
    "where": where,
    "program_dir": str(api.PROGRAM_DIR),
    "json_sha256": hashlib.sha256(api.DEFAULT_BMV2_JSON.read_bytes()).hexdigest(),
    "p4info_sha256": hashlib.sha256(api.DEFAULT_P4INFO.read_bytes()).hexdigest(),
    "environment": {k: env[k] for k in ("git_commit", "git_dirty", "program", "packages")},
    "bench_results": str(RESULTS),
    "nccl_busbw_max_rel_error": nccl_check()["nccl_busbw_max_rel_error"],
}))
"""
    )
    _assert_from_venv(installed, out["where"])
    # the program the package ships is p4/build's, byte for byte, and is found where it was installed
    assert Path(out["program_dir"]) == installed.site / "controller" / "program"
    build = REPO / "p4" / "build"
    assert out["json_sha256"] == hashlib.sha256((build / "p4ina.json").read_bytes()).hexdigest()
    assert out["p4info_sha256"] == hashlib.sha256((build / "p4ina.p4info.txtpb").read_bytes()).hexdigest()
    # the experiments' environment record: no git outside a checkout, the shipped program and its manifest
    env = out["environment"]
    assert env["git_commit"] is None and env["git_dirty"] is None
    assert env["program"]["bmv2_json_sha256"] == out["json_sha256"]
    assert env["program"]["manifest"] == json.loads((build / "manifest.json").read_text())
    assert env["packages"]["p4ina"] == version
    # benchmarks write under the current directory when there is no checkout
    assert out["bench_results"] == str(Path("results") / "bench.json")
    # the published nccl-tests figures the simulator validates NCCL's model against ship with it
    assert 0 <= out["nccl_busbw_max_rel_error"] <= 0.15


TOPOLOGY = """
import json, tempfile
from pathlib import Path
from controller import toposchema
from controller.fattree import fat_tree
from controller.topology import TopologyError
from controller.topospec import load_topology
folder = Path(tempfile.mkdtemp())
good, bad = folder / "good.json", folder / "bad.json"
fat_tree(2).save(good)
doc = json.loads(good.read_text())
doc["switches"][1]["tier"] = "zero"
bad.write_text(json.dumps(doc))
try:
    load_topology(str(bad))
    refusal = None
except TopologyError as ex:
    refusal = str(ex)
print(json.dumps({"where": where, "schema": toposchema.schema()["$id"], "good": len(load_topology(str(good)).switches),
                  "refusal": refusal}))
"""


def test_topology_schema_ships_and_checks_files(installed: Installed) -> None:
    """The published topology schema is package data: an installed p4ina checks a file against it."""
    assert "controller/topology.schema.json" in installed.package_files()
    out = installed.script(IMPORTED_FROM + TOPOLOGY)
    _assert_from_venv(installed, out["where"])
    assert out["schema"] == json.loads((REPO / "controller" / "topology.schema.json").read_text())["$id"]
    assert out["good"] == 5
    assert out["refusal"] is not None and 'switches[1].tier is "zero", a string; want' in out["refusal"]


SWITCH = """
import struct
from controller.api import DEFAULT_BMV2_JSON
from native import cbuild
from softswitch import ActionCall, Exact, Lpm, SoftSwitch, TableEntry
from wireformat import AGG

C = AGG.constants()
MACS = {1: 0x020000000001, 2: 0x020000000002, 3: 0x020000000003}
IPS = {1: 0x0A000101, 2: 0x0A000102, 3: 0x0A000201}

def checksum(header):
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF

def ipv4(src, dst, payload):
    hdr = bytearray(struct.pack(">BBHHHBBHII", 0x45, 0, 20 + payload, 0, 0x4000, 64, 17, 0, src, dst))
    struct.pack_into(">H", hdr, 10, checksum(bytes(hdr)))
    return bytes(hdr)

def contribution(child, values):
    elem = C["ELEM_INT32"]
    lanes = AGG.lane_struct(elem).pack(*values)
    agg = AGG.pack_header(version=C["AGG_VERSION"], op=C["OP_CONTRIB"], flags=0, elem_type=elem, shift=0, job_id=1,
                          shadow=0, slot=3, contributor=child, exponent=0, epoch=1, offset=0,
                          checksum=AGG.checksum(sum(values), 0, 1, 1))
    udp = struct.pack(">HHHH", C["UDP_PORT_AGG"], C["UDP_PORT_AGG"], 8 + len(agg) + len(lanes), 0)
    port = child + 1
    eth = (0x027034696E61).to_bytes(6, "big") + MACS[port].to_bytes(6, "big") + b"\\x08\\x00"
    return eth + ipv4(IPS[port], 0x0AFFFFFE, len(udp) + len(agg) + len(lanes)) + udp + agg + lanes

def named(names, suffix):
    (name,) = [n for n in names if n.endswith(suffix)]
    return name

sw = SoftSwitch(name="installed", engine="c")
sw.load_program(DEFAULT_BMV2_JSON.read_bytes())
t, a = sw.tables(), sw.actions()
sw.table_insert(named(t, "job_config"), TableEntry((Exact(1),), ActionCall(named(a, "set_job"),
                (1, 1, 2, 0, 16, 1, 0, C["ELEM_INT32"], 0, 1, C["ELEM_INT32"], 0, 0))))
for child in (0, 1):
    sw.table_insert(named(t, "job_ports"), TableEntry((Exact(1), Exact(child + 1)),
                    ActionCall(named(a, "from_child"), (child,))))
sw.mc_group_set(1, [(1, 0), (2, 1)])
for port in MACS:
    sw.table_insert(named(t, "host_port"), TableEntry((Exact(port),), ActionCall(named(a, "set_host"),
                    (MACS[port], IPS[port]))))
    sw.table_insert(named(t, "ipv4_lpm"), TableEntry((Lpm(IPS[port], 32),), ActionCall(named(a, "forward"), (port,))))

x = [i - 32 for i in range(AGG.num_lanes)]
y = [1000 * i for i in range(AGG.num_lanes)]
first = sw.process_packet(1, contribution(0, x))
second = sw.process_packet(2, contribution(1, y))
results = []
for port, pkt in second:
    fields = AGG.unpack_header(pkt[42:])
    results.append({"port": port, "op": fields["op"],
                    "lanes": list(AGG.lane_struct(fields["elem_type"]).unpack_from(pkt, 42 + AGG.header_bytes))})
payload = bytes(32)
udp = struct.pack(">HHHH", 5000, 6000, 8 + len(payload), 0)
fwd = sw.process_packet(1, MACS[3].to_bytes(6, "big") + MACS[1].to_bytes(6, "big") + b"\\x08\\x00"
                        + ipv4(IPS[1], IPS[3], 40) + udp + payload)
print(json.dumps({
    "where": where,
    "engine": sw.engine,
    "cache_dir": str(cbuild.cache_dir()),
    "first": len(first),
    "results": results,
    "sum": [u + v for u, v in zip(x, y)],
    "op_result": C["OP_RESULT"],
    "forwarded": [(port, pkt[22]) for port, pkt in fwd],
    "errors": sw.stats["errors"],
}))
"""


def test_switch_runs_the_shipped_program_on_its_c_engine(installed: Installed) -> None:
    _require_cc()
    before = installed.package_files()
    out = installed.script(IMPORTED_FROM + SWITCH)
    _assert_from_venv(installed, out["where"])
    assert out["engine"] == "c", "the installed switch did not run p4ina.json on its C engine"
    # two children's contributions complete a cell: nothing after the first, the sum multicast to both after
    # the second; an IPv4 packet is routed with its TTL decremented
    assert out["first"] == 0
    assert [r["port"] for r in out["results"]] == [1, 2]
    assert all(r["op"] == out["op_result"] and r["lanes"] == out["sum"] for r in out["results"])
    assert out["forwarded"] == [[3, 63]]
    assert out["errors"] == 0
    # compiled into the user's cache, nothing written into the installed package
    cache = installed.cache / "p4ina" / "softswitch-c"
    assert Path(out["cache_dir"]) == cache
    assert list(cache.glob("*.so")), f"no compiled library in {cache}"
    assert installed.package_files() == before


STREAM = """
from native import cbuild
from hosts import native_stream
lib = native_stream.library()
print(json.dumps({"where": where, "library": getattr(lib, "_name", None), "source": str(native_stream.SOURCE),
                  "cache_dir": str(cbuild.cache_dir())}))
"""


def test_agents_c_stream_loop_compiles(installed: Installed) -> None:
    _require_cc()
    before = installed.package_files()
    out = installed.script(IMPORTED_FROM + STREAM)
    _assert_from_venv(installed, out["where"])
    assert Path(out["source"]) == installed.site / "hosts" / "c" / "inc_stream.c"
    assert out["library"] is not None, "the agents' C stream loop did not build (they would stream in Python)"
    library = Path(out["library"])
    assert library.parent == Path(out["cache_dir"]) == installed.cache / "p4ina" / "softswitch-c"
    assert library.is_file()
    assert installed.package_files() == before
