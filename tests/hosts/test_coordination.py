"""Barriers, agreement and result checks, in threads and across a Unix socket."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hosts import workload
from hosts.coordination import (
    CoordinationError,
    CoordinatorClient,
    CoordinatorServer,
    LocalGroup,
    SizeMismatchError,
    agree_max,
    check_reports,
    parse_address,
    result_digest,
)


def in_threads(n: int, fn: Any) -> list[Any]:
    out: list[Any] = [None] * n

    def body(r: int) -> None:
        out[r] = fn(r)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_local_group_exchange_and_agreement() -> None:
    groups = LocalGroup.create(3)
    out = in_threads(3, lambda r: (groups[r].exchange("a", r * 10), agree_max(groups[r])("b", float(r), 5)))
    assert all(o == ([0, 10, 20], 2.0) for o in out)


def test_local_group_times_out_naming_who_arrived() -> None:
    groups = LocalGroup.create(2, timeout_s=0.05)
    with pytest.raises(CoordinationError, match=r"only ranks \[0\]"):
        groups[0].exchange("x", 1)


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_server_barrier_agreement_and_reports(kind: str, tmp_path: Path) -> None:
    address = f"unix:{tmp_path / 'coord.sock'}" if kind == "unix" else "tcp:127.0.0.1:0"
    with CoordinatorServer(address, 3) as server:

        def worker(r: int) -> float:
            client = CoordinatorClient(server.address, r, 3)
            try:
                client.barrier("start")
                m = agree_max(client)("max", [1.5, 7.0, -2.0][r], 100)
                client.report({"rank": r, "digest": "d", "max_error_ratio": 0.5})
                return m
            finally:
                client.close()

        assert in_threads(3, worker) == [7.0, 7.0, 7.0]
        reports = server.wait_reports(5)
    assert check_reports([reports[r] for r in range(3)], 3).ok


def test_different_tensor_sizes_are_refused() -> None:
    groups = LocalGroup.create(2)
    errors = in_threads(2, lambda r: _catch(lambda: agree_max(groups[r])("t", 1.0, 10 + r)))
    assert all(isinstance(e, SizeMismatchError) and "[10, 11]" in str(e) for e in errors)


def _catch(fn: Any) -> BaseException | None:
    try:
        fn()
    except BaseException as ex:  # noqa: BLE001 - returned: the test asserts on what was raised
        return ex
    return None


def test_a_failed_rank_releases_the_others(tmp_path: Path) -> None:
    with CoordinatorServer(f"unix:{tmp_path / 'c.sock'}", 2) as server:
        waiting = CoordinatorClient(server.address, 0, 2)
        failing = CoordinatorClient(server.address, 1, 2)
        try:
            t = threading.Thread(target=lambda: failing.report({"rank": 1, "error": "NonFiniteError: nan"}))
            t.start()
            with pytest.raises(CoordinationError, match="rank 1 failed: NonFiniteError"):
                waiting.barrier("start")
            t.join()
        finally:
            waiting.close()
            failing.close()


def test_unreachable_coordinator_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CoordinationError, match="cannot reach the coordinator"):
        CoordinatorClient(f"unix:{tmp_path / 'none.sock'}", 0, 1)
    with pytest.raises(ValueError, match="expected 'unix:/path'"):
        parse_address("udp:1.2.3.4")


def test_check_reports_finds_disagreement_and_large_errors() -> None:
    good = {"rank": 0, "digest": "a", "max_error_ratio": 0.3}
    assert check_reports([good, {**good, "rank": 1}]).ok
    outcome = check_reports([good, {"rank": 1, "digest": "b", "max_error_ratio": 2.0, "max_abs_error": 1e-3}])
    assert not outcome.ok
    assert any("disagree" in p for p in outcome.problems) and any("rank 1: error" in p for p in outcome.problems)
    assert "TimeoutError" in check_reports([{"rank": 0, "error": "TimeoutError: x", "digest": "a"}]).problems[0]
    assert not check_reports([good], size=2).ok


def test_workload_is_deterministic_and_digest_tracks_values() -> None:
    a = workload.make_input("normal", 100, 2, seed=3)
    assert np.array_equal(a, workload.make_input("normal", 100, 2, seed=3))
    assert not np.array_equal(a, workload.make_input("normal", 100, 1, seed=3))
    total, mag = workload.reference_sum("ones", 4, 3)
    assert total.tolist() == [6.0] * 4 and mag.tolist() == [6.0] * 4
    assert result_digest(a) == result_digest(a.copy()) != result_digest(a + 1)
    with pytest.raises(ValueError, match="unknown input kind"):
        workload.make_input("cats", 1, 0)


def test_a_barrier_the_server_decides_gives_every_rank_the_same_verdict(tmp_path: Path) -> None:
    seen: list[tuple[str, list[Any]]] = []

    def decide(tag: str, values: list[Any]) -> Any:
        seen.append((tag, values))
        if tag == "boom":
            raise RuntimeError("no tree left")
        return {"job": 7, "ranks": len(values)} if tag.startswith("failover-") else None

    with CoordinatorServer(f"unix:{tmp_path / 'c.sock'}", 3, timeout_s=10, decide=decide) as server:
        clients = [CoordinatorClient(server.address, r, 3) for r in range(3)]
        try:
            out = in_threads(3, lambda r: clients[r].decided_exchange("failover-1-0", {"rank": r}))
            assert [o[2] for o in out] == [{"job": 7, "ranks": 3}] * 3
            assert all(o[0] == [{"rank": 0}, {"rank": 1}, {"rank": 2}] for o in out)
            assert [t for t, _ in seen] == ["failover-1-0"]  # decided once, by the last arrival
            plain = in_threads(3, lambda r: clients[r].decided_exchange("step-2", r))
            assert [o[2] for o in plain] == [None] * 3
            failed = in_threads(3, lambda r: clients[r].decided_exchange("boom", r))
            assert all(o[2] == {"error": "RuntimeError: no tree left"} for o in failed)
        finally:
            for c in clients:
                c.close()


def test_ask_is_answered_at_once_without_the_other_ranks(tmp_path: Path) -> None:
    with CoordinatorServer(
        f"unix:{tmp_path / 'c.sock'}",
        3,
        timeout_s=10,
        ask=lambda topic, rank, value: {"topic": topic, "rank": rank, "value": value},
    ) as server:
        client = CoordinatorClient(server.address, 1, 3)
        try:
            assert client.ask("stall", 5) == {"topic": "stall", "rank": 1, "value": 5}
        finally:
            client.close()
    with CoordinatorServer(f"unix:{tmp_path / 'd.sock'}", 2, timeout_s=10) as server:
        client = CoordinatorClient(server.address, 0, 2)
        try:
            assert client.ask("stall") is None  # nobody answers: the worker treats its tree as dead
        finally:
            client.close()


def test_a_calling_in_barrier_calls_back_only_ranks_that_finished_its_step(tmp_path: Path) -> None:
    """Rank 1 reported step 4 and waits for its next command: rank 0's barrier with call_in hands it a rejoin
    (and withdraws its report); rank 2 reported step 4 with an error and is not called; with no call-in open a
    rank gets its next step as always."""
    with CoordinatorServer(f"unix:{tmp_path / 'c.sock'}", 3, timeout_s=10) as server:
        clients = [CoordinatorClient(server.address, r, 3) for r in range(3)]
        try:
            assert clients[1].next_command(4, wait_s=0.05) is None  # nothing yet
            clients[1].step_report(4, {"digest": "a"})
            clients[2].step_report(4, {"error": "it failed"})
            out: dict[str, Any] = {}
            t = threading.Thread(
                target=lambda: out.update(
                    d=clients[0].decided_exchange("failover-4-0", 0, call_in={"step": 4, "attempt": 0})
                )
            )
            t.start()
            call = clients[1].next_command(4, wait_s=5)
            assert call == {"op": "rejoin", "tag": "failover-4-0", "step": 4, "attempt": 0}
            assert 1 not in server.step_reports(4, 0.0)  # withdrawn until it reports again
            server.post(5, {"method": "x"})
            assert clients[2].next_command(4, wait_s=0.2)["step"] == 5  # not called: it did not finish step 4
            assert clients[1].next_command(4, wait_s=0.2)["step"] == 5  # called once only
            rest = [
                threading.Thread(
                    target=lambda r=r: clients[r].decided_exchange("failover-4-0", r, call_in={"step": 4, "attempt": 0})
                )
                for r in (1, 2)
            ]
            for th in [*rest]:
                th.start()
            for th in [t, *rest]:
                th.join(5)
            assert out["d"][0] == [0, 1, 2] and not server._call_ins
        finally:
            for c in clients:
                c.close()
