"""The faults experiment's summary as text (its plot is experiments.faults.run.plot)."""

from __future__ import annotations

from typing import Any


def _ms(spread: dict[str, Any] | None) -> str:
    """A failures.<kind> figure (seconds) as "median ms (worst N)"; "-" when no run gave one."""
    return f"{spread['median'] * 1e3:.0f} ms (worst {spread['worst'] * 1e3:.0f})" if spread else "-"


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
    for kind, v in s.get("failures", {}).items():
        if kind == "controller_crash":
            lines.append(
                f"controller crash: {v['runs']} runs, exact {v['exact']}; the standby primary on every switch "
                f"{_ms(v.get('detection_s'))} after the kill, reconciled in {_ms(v.get('reconcile_s'))}; the switch "
                f"killed next moved off in {_ms(v.get('switch_failover_s'))}"
            )
            continue
        r, sig = v.get("step_over_lossless"), v.get("signal_s")
        lines.append(
            f"{kind.replace('_', ' ')}: {v['runs']} runs, exact {v['exact']}, triggers {', '.join(v['triggers'])}; "
            + (f"heard {_ms(sig)}, " if sig else "")
            + f"every rank stopped waiting {_ms(v.get('detection_s'))}, "
            + (
                f"failed step x{r['median']:.2f} a loss-free one (worst x{r['worst']:.2f}; goal "
                f"x{v['goal']['median']:g} / x{v['goal']['worst']:g}: {'met' if v['goal_met'] else 'missed'})"
                if r
                else "no failed step completed"
            )
            + (
                f"; verdict {_ms(v['verdict_s'])} after the failure (bound {v['bound_s'] * 1e3:.0f} ms), "
                f"localised {v['localised']}, "
                f"{v.get('false_alarms_under_loss', 0)} false alarm(s) under the loss sweep"
                if v.get("verdict_s")
                else ""
            )
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
