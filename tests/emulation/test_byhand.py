"""`p4ina allreduce` on a network `p4ina serve` keeps up: an installed job's all-reduce with the job's own
parameters, a host method, run again on the same install; and serve's folder per topology."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from controller.state import Served, State, process_start
from tests.emulation.serving import ok, p4ina, served


def rank_rows(out: str) -> list[list[str]]:
    """The per-rank table's rows (rep, rank, host, latency ms, sent, retx, dups, digest, rel L2, ...)."""
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:3] == ["rep", "rank", "host"])
    rows = []
    for ln in lines[head + 2 :]:
        if not ln.strip():
            break
        rows.append(ln.split())
    return rows


@pytest.mark.mininet
def test_allreduce_by_hand_with_the_jobs_own_parameters(tmp_path: Path, leak_check: None) -> None:
    with served(tmp_path, "--topology", "leaf-spine:2x1x2") as net:
        assert "p4ina allreduce --job 7" in net.banner
        ok(tmp_path, "pipeline", "push")
        ok(tmp_path, "routes", "install")
        job = ok(tmp_path, "job", "install", "--job", "7", "--hosts", "h1-h4", "--lanes", "int8")
        assert len(job["switches"]) == 3  # two leaves and the spine: the tree's bound, not one switch's

        # in-network, as serve printed it: the job's lanes, shift, slots, error bound and lane limit
        done = p4ina(tmp_path, "allreduce", "--job", "7", "--reps", "2")
        assert done.code == 0, done.err + done.out
        lines = done.out.splitlines()
        assert lines[0].startswith("inc-int8 through job 7 (root s1, 3 switches; int8 up, int8 down, shift 2")
        assert lines[0].endswith("on h1,h2,h3,h4") and "epochs from 1" in lines[0]
        rows = rank_rows(done.out)
        assert [(r[0], r[1], r[2]) for r in rows] == [
            (rep, str(rank), f"h{rank + 1}") for rep in ("w0", "0", "1") for rank in range(4)
        ]
        for rep in ("w0", "0", "1"):
            of = [r for r in rows if r[0] == rep]
            assert len({r[7] for r in of}) == 1  # every rank the same sum
            checker = of[0]
            assert float(checker[8]) <= float(checker[9]) and float(checker[10]) <= 1.0  # rel L2, error / bound
            assert all(r[5] == "0" for r in of)  # no retransmission on unshaped, lossless links
        assert re.search(r"^inc-int8\s+4\s+64Ki\s.*\sok$", done.out, re.M)  # the experiment's point line
        assert lines[-1].startswith("ok: true (median ")

        # again on the same install, smaller (the run opens with a call over every slot): its epochs start past
        # the ones the cells hold (agents starting at 1 again had their contributions dropped as stale)
        again = p4ina(tmp_path, "allreduce", "--job", "7", "--size", "1Ki-elem", "--reps", "2", "--json")
        assert again.code == 0, again.err + again.out
        data = again.json()
        assert data["ok"] and data["first_epoch"] == 1 + 3 and data["problems"] == []
        assert data["job"]["error_lsb"] == job["error_lsb"] and data["job"]["q_limit"] == job["q_limit"]
        assert len(data["rows"]) == 3 * 4 and {r["elements"] for r in data["rows"]} == {1024}

        # a host method between the job's hosts: no switch aggregates, ordinary IPv4 forwarding
        ring = p4ina(tmp_path, "allreduce", "--method", "ring", "--hosts", "h1-h4", "--size", "16Ki-elem", "--json")
        assert ring.code == 0, ring.err + ring.out
        data = ring.json()
        assert data["ok"] and data["method"] == "ring" and data["job"] is None
        assert sorted({r["rank"] for r in data["rows"]}) == [0, 1, 2, 3]
        assert all(r["error"] == "" for r in data["rows"])
        point = data["summary"]["points"][0]
        assert point["ok"] and point["rel_l2_error"] <= point["rel_l2_target"]

        # what cannot run is one line, before any agent starts
        for args, why in (
            (["--method", "inc-int16"], "inc-int16 runs through an installed job: pass --job N"),
            (["--job", "3"], "job 3 is not installed (installed: 7 (inc-int8)"),
            (["--job", "7", "--hosts", "h1,h2"], "job 7 aggregates h1,h2,h3,h4"),
            (["--method", "ring", "--hosts", "h1,h9"], "no host h9 in the served network"),
        ):
            done = p4ina(tmp_path, "allreduce", *args)
            assert done.code == 2 and len(done.err.strip().splitlines()) == 1 and why in done.err, (args, done.err)
        net.stop()
    done = p4ina(tmp_path, "allreduce", "--job", "7")
    assert done.code == 2 and "is down (stopped " in done.err and len(done.err.strip().splitlines()) == 1


def test_serve_keeps_a_folder_per_topology_and_refuses_a_second_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One state per topology (a custom topology's serve used to find the last one's jobs in the shared state
    file, and its own first printed command failed); a topology served already is refused by name."""
    from emulation.serve import main, topology_name

    assert topology_name("leaf-spine:2x1x2") == "leaf-spine-2x1x2"
    assert topology_name("fat-tree:4") == "fat-tree-4"
    assert topology_name("/x/my topo.json") == "my-topo"
    assert topology_name("current.json") == "current-topology"  # never the link state/current
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "state" / "leaf-spine-2x1x2"
    me = Served(os.getpid(), process_start(os.getpid()) or 0, "leaf-spine:2x1x2", "2026-01-01T00:00:00")
    State(folder / "p4ina-state.json", topology="x.json", served=me).save()
    assert main(["--topology", "leaf-spine:2x1x2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"p4ina serve: error: leaf-spine:2x1x2 is already served from state/leaf-spine-2x1x2 by pid {os.getpid()}"
    )
    assert len(err.strip().splitlines()) == 1
