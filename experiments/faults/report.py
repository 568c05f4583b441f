"""The faults experiment's summary as text (its plot is experiments.faults.run.plot)."""

from __future__ import annotations

from typing import Any


def table(s: dict[str, Any]) -> str:
    """The faults summary as lines a reader can scan: one per phase, then the problems."""
    lines = [
        f"loss-free: {s['lossless'].get('latency_s', float('nan')) * 1e3:.1f} ms, exact {s['lossless'].get('exact')}, "
        f"timer floor {s['lossless'].get('rto_floor_s', float('nan')) * 1e3:.1f} ms"
    ]
    for name, v in s.get("loss", {}).items():
        ratio = v["latency_over_lossless"]
        spread = sorted(v.get("latencies_s") or [])
        lines.append(
            f"loss {name:>5}: exact {v['exact']}, {v['retransmissions']} retransmissions "
            f"({v.get('early_retransmissions', 0)} early), latency x{ratio:.2f} (median of {len(spread)}: "
            f"{spread[0] * 1e3:.0f}-{spread[-1] * 1e3:.0f} ms)"
            if ratio and spread
            else f"loss {name}: {v['errors']}"
        )
    dr = s.get("dup_reorder")
    if dr:
        lines.append(
            f"duplication {dr['dup'] * 100:g}% / reorder {dr['reorder'] * 100:g}%: exact {dr['exact']}, "
            f"{dr['duplicated_packets']} copied and {dr['held_packets']} held back on the links, switches "
            f"saw {dr['switch_retransmissions']} repeats and dropped {dr['switch_stale_drops']} stale, "
            f"workers {dr['worker_duplicates']} duplicates"
        )
    iso = s.get("isolation")
    if iso and "skipped" in iso:
        lines.append(f"isolation: skipped ({iso['skipped']})")
    elif iso:
        slow = ", ".join(f"{k} x{v:.2f}" for k, v in iso["slowdowns"].items())
        lines.append(
            f"isolation: {len(iso['jobs'])} jobs and a ring at once, exact {iso['exact']}, isolated "
            f"{iso['isolated']} ({iso['foreign_cells']} foreign of {iso['register_cells_checked']} cells read "
            f"back); slowdowns {slow}"
        )
    f = s.get("switch_failure")
    if f:
        lines.append(
            f"switch failure: {f['victim']} killed, {f['verdict']}; recovered in {f['recovery_s']} s "
            f"(detection bound {f['detect_bound_s']:.2f} s, goal {f['goal_s']:.2f} s), exact {f['exact']}, "
            f"later all-reduces exact {f['later_exact']}"
        )
    ln = s.get("link_failure")
    if ln:
        lines.append(
            f"link failure: {ln['link']} down, {ln['verdict']}; recovered in {ln['recovery_s']} s "
            f"(goal {ln['goal_s']:.2f} s), exact {ln['exact']}, later all-reduces exact {ln['later_exact']}"
        )
    e = s.get("edge_failure")
    if e:
        lines.append(f"edge failure: {e['switch']} ({', '.join(e['hosts'])}) reported {e['reported']}: {e['message']}")
    d = s.get("sdc")
    if d:
        lines.append(
            f"silent corruption: {d['detected']} detected / {d['injected']} injected, exact {d['exact']}"
            + (
                f", {d['false_alarm_redos']} stalled round(s) redone on the same tree"
                if d.get("false_alarm_redos")
                else ""
            )
        )
    lines.append("problems: " + ("; ".join(s["problems"]) or "none"))
    return "\n".join(lines)
