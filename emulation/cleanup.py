"""`p4ina clean` (make clean-net): remove what a crashed emulation left behind, and nothing else.

Every emulated network writes a run record (/run/p4ina/emulation/<tag>.json)
listing the processes it started (PID + start time, so a reused PID is never
mistaken for ours) and the network namespaces of its hosts (by inode); its
root-side interfaces are named p4ina<tag>-... . Cleanup acts only on records
whose runner is gone, and on p4ina<tag>- interfaces whose tag belongs to no
live run. It never kills a process by name.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

LOG = logging.getLogger(__name__)

RECORD_DIR = Path(os.environ.get("P4INA_RUN_RECORDS", "/run/p4ina/emulation"))
IFACE_RE = re.compile(r"^p4ina([0-9a-f]{2})-")


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # /proc/PID/stat field 22
    what: str = ""
    netns: int | None = None  # inode of its network namespace (host shells)


@dataclass
class RunRecord:
    """What one emulated network owns; rewritten as it grows."""

    tag: str
    runner: Proc
    run_dir: str = ""
    procs: list[Proc] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return RECORD_DIR / f"{self.tag}.json"

    def save(self) -> None:
        RECORD_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        tmp.replace(self.path)

    def add(self, proc: Proc) -> None:
        self.procs.append(proc)

    def remove_file(self) -> None:
        self.path.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        data = json.loads(path.read_text())
        return cls(
            data["tag"], Proc(**data["runner"]), data.get("run_dir", ""), [Proc(**p) for p in data.get("procs", [])]
        )


def start_time(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[19])


def netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def this_process(what: str = "runner") -> Proc:
    pid = os.getpid()
    return Proc(pid, start_time(pid) or 0, what)


def alive(proc: Proc) -> bool:
    """The very process recorded (same PID and start time) still exists."""
    return start_time(proc.pid) == proc.start


def records() -> list[RunRecord]:
    out = []
    for path in sorted(RECORD_DIR.glob("*.json")) if RECORD_DIR.exists() else []:
        try:
            out.append(RunRecord.load(path))
        except (OSError, ValueError, KeyError, TypeError) as ex:
            LOG.warning("ignoring unreadable run record %s: %s", path, ex)
    return out


def root_interfaces() -> list[str]:
    return sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []


def new_tag() -> str:
    """A 2-hex-digit tag used by no live run and no existing interface."""
    used = {r.tag for r in records()} | {m.group(1) for n in root_interfaces() if (m := IFACE_RE.match(n))}
    for _ in range(512):
        tag = secrets.token_hex(1)
        if tag not in used:
            return tag
    raise RuntimeError("no free p4ina run tag: run `make clean-net` to remove leftovers of crashed runs")


def _kill(pids: list[int], grace_s: float = 3.0) -> int:
    """SIGTERM the given PIDs, SIGKILL the ones still there after grace_s; returns how many existed."""
    hit = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            hit.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(start_time(p) is not None for p in hit):
        time.sleep(0.05)
    for pid in hit:
        if start_time(pid) is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return len(hit)


def pids_in_netns(inode: int) -> list[int]:
    """Every process in the network namespace with this inode (never the root namespace's)."""
    if inode == netns_inode(1):
        return []
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and netns_inode(int(entry)) == inode:
            out.append(int(entry))
    return out


@dataclass
class CleanupReport:
    runs: list[str] = field(default_factory=list)
    processes: int = 0
    interfaces: list[str] = field(default_factory=list)
    skipped_live: list[str] = field(default_factory=list)


def clean_record(rec: RunRecord, report: CleanupReport) -> None:
    """Kill the record's processes (and everything inside its hosts' namespaces), then drop the record."""
    namespaces = [p.netns for p in rec.procs if p.netns]
    inside = [pid for ino in namespaces if ino for pid in pids_in_netns(ino)]
    own = [p.pid for p in rec.procs if alive(p)]
    report.processes += _kill(sorted(set(inside) | set(own)))
    report.runs.append(rec.tag)
    rec.remove_file()


def delete_interfaces(tags: set[str] | None, keep: set[str], report: CleanupReport) -> None:
    """Delete root-namespace p4ina<tag>- interfaces of the given tags (None: any tag not in keep)."""
    for name in root_interfaces():
        m = IFACE_RE.match(name)
        if not m or m.group(1) in keep or (tags is not None and m.group(1) not in tags):
            continue
        done = subprocess.run(["ip", "link", "del", name], capture_output=True, text=True)
        if done.returncode == 0:
            report.interfaces.append(name)
        elif "Cannot find device" not in done.stderr:  # the peer's deletion took it already
            LOG.warning("could not delete %s: %s", name, done.stderr.strip())


def clean(include_live: bool = False) -> CleanupReport:
    """Remove leftovers of runs whose runner died (all runs with include_live)."""
    report = CleanupReport()
    live: set[str] = set()
    for rec in records():
        if alive(rec.runner) and not include_live and rec.runner.pid != os.getpid():
            live.add(rec.tag)
            report.skipped_live.append(rec.tag)
            continue
        clean_record(rec, report)
    delete_interfaces(None, live, report)
    return report


def main(argv: list[str] | None = None, prog: str = "p4ina clean") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--include-live", action="store_true", help="also tear down runs whose runner is still alive")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    if os.geteuid() != 0:
        print(f"{prog}: needs root (it deletes interfaces and stops processes)", file=sys.stderr)
        return 1
    report = clean(args.include_live)
    if args.json:
        print(json.dumps(asdict(report)))
    else:
        print(
            f"cleaned {len(report.runs)} run(s) {report.runs or ''}: {report.processes} process(es) stopped, "
            f"{len(report.interfaces)} interface(s) deleted"
            + (
                f"; left running: {report.skipped_live} (their runner is alive; --include-live to stop them)"
                if report.skipped_live
                else ""
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
