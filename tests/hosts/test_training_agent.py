"""Agents train: the "train" command runs segments of steps over the agents' own workers (model switch, loopback)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hosts import quantization as qz
from hosts import training as T
from hosts.agent import Agent, AgentConfig
from hosts.coordination import CoordinatorClient, CoordinatorServer
from hosts.fakeswitch import FakeSwitch, FakeTransport
from hosts.packets import Endpoint
from hosts.tickets import JobTicket
from tests.hosts.test_agent import free_base_ports

N = 4
CFG = T.TrainConfig(steps=24, eval_every=8)
LANES = {"int32": (qz.ELEM_INT32, 0), "int8": (qz.ELEM_INT8, 2)}  # int8 both ways, 4 workers: the root shifts by 2


@pytest.fixture(params=list(LANES))
def rig(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[CoordinatorServer, dict[str, Any], list[Agent]]]:
    elem, shift = LANES[request.param]
    server = CoordinatorServer(f"unix:{tmp_path / 'c.sock'}", N, timeout_s=60).start()
    switch = FakeSwitch(job_id=5, n_workers=N, slot_count=16, result_type=elem, shift=shift)
    peers = tuple(f"127.0.0.1:{p}" for p in free_base_ports(N))
    agents, threads = [], []
    for r in range(N):
        client = CoordinatorClient(server.address, r, N)
        agent = Agent(
            AgentConfig(rank=r, workers=N, coord=server.address, peers=peers, groups=("a", "a", "b", "b")),
            client,
            transport=FakeTransport(switch, r),
            endpoint=Endpoint(f"02:00:00:00:00:0{r}", f"10.0.0.{r + 1}"),
        )
        agents.append(agent)
        threads.append(threading.Thread(target=agent.serve, daemon=True))
    for t in threads:
        t.start()
    lanes = request.param
    job = JobTicket(
        job_id=5, slots=16, up_lanes=lanes, down_lanes=lanes, shift=shift, install=0, timeout_s=5.0, min_timeout_s=5.0
    ).to_dict()
    try:
        yield server, {"lanes": request.param, "job": job}, agents
    finally:
        server.post(10_000, {"op": "quit"})
        for t in threads:
            t.join(30)
        for a in agents:
            a.close()
        server.close()


def train(
    server: CoordinatorServer, method: str, job: dict[str, Any], first_cmd: int, segment: int = 8
) -> list[dict[str, dict[str, Any]]]:
    """Post a whole run as segments (all at once, as the runner does); every segment's reports, in order."""
    posted = []
    step = first_cmd
    for first in range(1, CFG.steps + 1, segment):
        count = min(segment, CFG.steps + 1 - first)
        server.post(
            step,
            {
                "op": "train",
                "method": method,
                "run": method,
                "train": CFG.to_dict(),
                "first": first,
                "count": count,
                "last": first + count > CFG.steps,
                "checker": 0,
                "job": job,
            },
        )
        posted.append(step)
        step += 1
    out = []
    for s in posted:
        reports = server.step_reports(s, 60)
        assert sorted(reports) == list(range(N)), reports
        assert not [r["error"] for r in reports.values() if "error" in r]
        out.append(reports)
    return out


def test_every_method_trains_with_identical_ranks_and_shared_releases(rig: Any) -> None:
    server, setup, agents = rig
    inc = "inc-int32" if setup["lanes"] == "int32" else "inc-int8"
    exact = T.simulate(CFG, N)
    model = T.model_for(CFG, T.digits())
    for i, method in enumerate((inc, "ring", "ring-bf16")):
        segments = train(server, method, setup["job"], first_cmd=100 * (i + 1))
        records = {r: [rec for seg in segments for rec in seg[r]["records"]] for r in range(N)}
        assert [rec["step"] for rec in records[0]] == list(range(1, CFG.steps + 1))
        for k in range(CFG.steps):
            at = [records[r][k] for r in range(N)]
            assert len({rec["digest"] for rec in at}) == 1, f"{method}: ranks differ after step {k + 1}"
            assert len({rec["sum_digest"] for rec in at}) == 1
            assert len({rec["t_release"] for rec in at}) == 1  # one barrier, one start
            for rec in at:
                assert (
                    rec["t_begin"]
                    <= rec["t_ready"]
                    <= rec["t_release"]
                    <= rec["t_done"]
                    <= rec["t_back"]
                    <= rec["t_end"]
                )
        # the checker's snapshots are the parameters whose digests every rank reported
        sent = [(int(s), text) for seg in segments for s, text in seg[0]["snapshots"].items()]
        assert sorted(s for s, _ in sent) == CFG.eval_steps()  # each once, also where a segment starts at one
        snaps = dict(sent)
        digests = {rec["step"]: rec["digest"] for rec in records[0]}
        for step, text in snaps.items():
            if step:
                assert T.params_digest(T.decode_params(text)) == digests[step]
        assert not any(seg[r]["snapshots"] for seg in segments for r in range(1, N))
        end = {segments[-1][r]["t_end_release"] for r in range(N)}
        assert len(end) == 1 and end.pop() > records[0][-1]["t_release"]
        final = T.evaluate(model, T.digits(), T.decode_params(snaps[CFG.steps]), CFG.steps)
        assert T.within_tolerance(final.test_acc, exact.final.test_acc), (method, final, exact.final)
    assert all(not a._replicas for a in agents)


def test_a_segment_out_of_order_is_refused(rig: Any) -> None:
    server, setup, _agents = rig
    server.post(
        1,
        {
            "op": "train",
            "method": "ring",
            "run": "r",
            "train": CFG.to_dict(),
            "first": 5,
            "count": 2,
            "checker": 0,
            "job": setup["job"],
        },
    )
    reports = server.step_reports(1, 30)
    assert all("segment starts at step 5" in r["error"] for r in reports.values())
