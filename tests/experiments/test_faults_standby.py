"""The faults experiment's controller-crash phase (experiments.faults.standby) on embedded switches, no Mininet:
the runner's controller steps aside, a primary process is killed, the standby takes over with every job and
token as installed, moves the job off the root killed after it, and the runner's controller goes on with the
state the standby left."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.api import Controller
from controller.leafspine import leaf_spine
from controller.state import State
from emulation.localnet import embedded_switches
from experiments.faults.standby import controller_crash

TIMEOUT = 120.0  # a bound on waiting on a loaded machine, not a measurement


def test_the_controller_crash_phase_finds_nothing_lost_and_the_job_moved(tmp_path: Path) -> None:
    try:
        cm = embedded_switches(leaf_spine(2, 2, 1))
        live, handles = cm.__enter__()
    except (OSError, RuntimeError) as ex:
        pytest.skip(f"the embedded switch cannot start here: {ex}")
    try:
        topo_file = tmp_path / "topo.json"
        live.save(topo_file)
        with Controller(live, state=State(tmp_path / "state.json"), timeout=TIMEOUT) as ctl:
            ctl.push_pipeline()
            before = ctl.install_job(12, [h.name for h in live.hosts])
            out = controller_crash(
                ctl, topo_file, tmp_path / "crash", kill_switch=lambda name: handles[name].stop(), timeout_s=TIMEOUT
            )
            assert not out.problems, out.problems
            tokens = {sp.switch: sp.token for sp in before.switches}
            assert out.jobs_installed == out.jobs_reconciled == out.jobs_on_switches == {12: tokens}
            assert out.kill_to_primary_s is not None and 0 < out.kill_to_primary_s < 10.0
            assert out.victim == before.root and out.failover_s is not None
            after = ctl.state.jobs[12]  # the runner's controller adopted the standby's state
            assert after.root != before.root and ctl.state.failed == {before.root}
            assert out.jobs_after_failover == {12: {sp.switch: sp.token for sp in after.switches}}
            # and it controls the fabric again: its sessions reopen as primary and a write goes through
            assert all(d.clean for d in ctl.verify().values())
            ctl.remove_job(12)
            assert ctl.jobs() == []
    finally:
        cm.__exit__(None, None, None)
