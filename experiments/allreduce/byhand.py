"""`p4ina allreduce`: an all-reduce, repeated, on the network `p4ina serve` keeps up, checked as `emulate` checks.

    sudo p4ina serve --topology leaf-spine:2x1x2            # terminal 1
    p4ina pipeline push; p4ina routes install               # terminal 2
    p4ina job install --job 7 --hosts h1-h4 --lanes int8
    p4ina allreduce --job 7                                 # through the job's switches
    p4ina allreduce --method ring --hosts h1-h4             # a host method between the same hosts

An in-network method runs through an installed job with the job's own parameters, read from the controller's
state (its lanes, shift, slots, and the error bound and lane limit the controller computed for its tree, so
the check is against this tree's bound, not a single switch's). One agent per member host (hosts.agent, as
the experiment starts them) runs in that host's network namespace; the experiment's harness
(experiments.harness.Runner) drives them: the same steps, timing, link and CPU counters and checks as
`p4ina emulate`, and the same per-rank rows (raw.csv's columns). Prints them, the experiment's point line
(experiments.allreduce.report.bounds_table) and ok; exits 1 unless every repetition is exact and within its
bounds. Needs root (it enters the hosts' namespaces).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from controller.planner import JobPlan
from controller.state import State, StateError, default_state, locked
from controller.topology import Topology, TopologyError, host_names
from emulation.shaping import LinkShape
from experiments import bounds
from experiments.allreduce import analysis, report
from experiments.cli import SIZES_HELP, needs_root, setup_logging, size_arg, tear_down_on_sigterm
from experiments.config import ConfigError, ExperimentConfig, Sample
from experiments.harness import Runner, StepFailed, job_ticket, short_tmpdir, timeouts
from experiments.results import human_size, jsonable
from hosts.methods import METHODS, Method
from hosts.ring import topology_order
from hosts.workload import KINDS
from wireformat import AGG

PROG = "p4ina allreduce"
LOG = logging.getLogger(__name__)
WIDTH = {"int8": 8, "int16": 16, "int32": 32}
# epochs are 8 bits and compared in serial order (docs/DESIGN.md): a run's calls must stay within 127 of the
# oldest epoch a cell of the job may hold; each run starts with a call that touches every slot (prime_size)
MAX_CALLS = 100


class ByHandError(Exception):
    """The run cannot start; the message names what and the fix (one line, exit 2)."""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", type=int, help="an installed job (p4ina job list): its hosts, and its switches for inc-*")
    ap.add_argument(
        "--method",
        choices=tuple(name for name, m in METHODS.items() if not m.alltoall),
        help="default: the job's in-network method (inc-<its lanes>); ring, ring-bf16, hier, tree run between "
        "the hosts over IPv4 and need no job",
    )
    ap.add_argument("--hosts", help="h1,h2,... ranges h1-h4 or all (default: the job's hosts)")
    ap.add_argument(
        "--size", type=size_arg, default=64 << 10, help=f"the all-reduce's size, {SIZES_HELP} (default 64Ki-elem)"
    )
    ap.add_argument("--reps", type=int, default=3, help="measured repetitions (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up repetitions before them, not counted (default 1)")
    ap.add_argument("--input", choices=KINDS, default="normal", help="the workers' inputs (default normal)")
    ap.add_argument("--seed", type=int, default=0, help="the inputs follow from it (default 0)")
    ap.add_argument(
        "--state",
        type=Path,
        default=None,
        help="the served network's state (default: state/current/p4ina-state.json, which p4ina serve points at)",
    )
    ap.add_argument("--json", action="store_true", help="the rows and the point as JSON")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return ap


def job_method(plan: JobPlan) -> str:
    """The in-network method of a job: inc-<its narrower lanes> (the accuracy its results can have)."""
    spec = plan.spec
    return f"inc-{min(spec.up_lanes, spec.down_lanes, key=WIDTH.__getitem__)}"


def prime_size(plan: JobPlan, size: int) -> int:
    """Elements of the call that opens a run by touching every slot of the job (0 when the run's size does):
    then every cell holds an epoch of this run, and the next run, starting past them, is newer than all."""
    window = plan.spec.slots * AGG.num_lanes
    return 0 if size >= window else window


def choose(args: argparse.Namespace, state: State, model: Topology) -> tuple[Method, JobPlan | None, tuple[str, ...]]:
    """(method, its job or None, hosts in rank order) from the command line and the state; ByHandError else."""
    plan = None
    if args.job is not None:
        plan = state.jobs.get(args.job)
        if plan is None:
            have = ", ".join(f"{j} ({job_method(p)})" for j, p in sorted(state.jobs.items())) or "none"
            raise ByHandError(f"job {args.job} is not installed (installed: {have}; p4ina job install)")
    name = args.method
    if name is None:
        if plan is None:
            if len(state.jobs) != 1:
                have = ", ".join(map(str, sorted(state.jobs))) or "none installed"
                raise ByHandError(f"which all-reduce? pass --job N (jobs: {have}) or --method ring|ring-bf16|hier|tree")
            plan = next(iter(state.jobs.values()))
        name = job_method(plan)
    m = METHODS[name]
    if m.in_network:
        if plan is None:
            fits = [j for j, p in sorted(state.jobs.items()) if job_method(p) == name]
            if len(fits) != 1:
                which = (
                    f"jobs with its lanes: {', '.join(map(str, fits))}"
                    if fits
                    else f"install one: p4ina job install --lanes {m.lanes}"
                )
                raise ByHandError(f"{name} runs through an installed job: pass --job N ({which})")
            plan = state.jobs[fits[0]]
        if job_method(plan) != name:
            raise ByHandError(
                f"job {plan.job_id} has {plan.spec.up_lanes} lanes up and {plan.spec.down_lanes} down: its method is "
                f"{job_method(plan)}, not {name} (omit --method)"
            )
    if args.hosts:
        try:
            hosts = host_names(model, args.hosts)
        except TopologyError as ex:
            raise ByHandError(f"--hosts {args.hosts!r}: {ex}") from ex
        unknown = [h for h in hosts if not model.has_host(h)]
        if unknown:
            raise ByHandError(
                f"--hosts: no host {', '.join(unknown)} in the served network (it has {model.hosts[0].name}.."
                f"{model.hosts[-1].name})"
            )
        if m.in_network and plan is not None and set(hosts) != set(plan.spec.hosts):
            raise ByHandError(
                f"job {plan.job_id} aggregates {','.join(plan.spec.hosts)}: an in-network all-reduce runs on its hosts "
                "(omit --hosts)"
            )
    elif plan is not None:
        hosts = tuple(plan.spec.hosts)
    else:
        raise ByHandError(f"{name} between which hosts? pass --hosts (e.g. h1-h4) or --job N for a job's")
    if len(hosts) < 2:
        raise ByHandError(f"an all-reduce needs two hosts or more (got {', '.join(hosts)})")
    if not m.in_network and not state.routes:
        raise ByHandError(f"{name} goes host to host over IPv4: install the routes first (p4ina routes install)")
    return m, (plan if m.in_network else None), hosts


def reserve_epochs(state_path: Path, plan: JobPlan, calls: int) -> int:
    """The first epoch of this run's `calls` in-network all-reduces, reserved in the state (under its lock)."""
    with locked(state_path) as state:
        current = state.jobs.get(plan.job_id)
        if current is None or current.to_dict() != plan.to_dict():
            raise ByHandError(f"job {plan.job_id} changed while starting (removed or reinstalled): run again")
        first = state.epochs.get(plan.job_id, 1)
        state.epochs[plan.job_id] = (first + calls) % 256
    return first


def per_rank_table(rows: list[Sample], hosts: tuple[str, ...], warmup: int) -> list[str]:
    """The experiment's per-rank rows (raw.csv), the columns a reader checks a run by."""
    head = ["rep", "rank", "host", "latency ms", "sent", "retx", "dups", "digest", "rel L2", "target", "err/bound", ""]
    out = []
    for s in rows:
        checked = s.checker and not math.isnan(s.rel_l2_error)
        out.append(
            [
                f"w{s.rep}" if s.warmup else str(s.rep - warmup),
                str(s.rank),
                hosts[s.rank],
                "-" if math.isnan(s.latency_s) else f"{s.latency_s * 1e3:.2f}",
                str(s.packets_sent),
                str(s.retransmissions),
                str(s.duplicates),
                s.digest or "-",
                f"{s.rel_l2_error:.3g}" if checked else "",
                f"{s.rel_l2_target:.3g}" if checked else "",
                f"{s.max_error_ratio:.3g}" if checked else "",
                f"error: {s.error}" if s.error else "",
            ]
        )
    widths = [max(len(r[i]) for r in [head, *out]) for i in range(len(head))]
    fmt = "  ".join(f"{{:>{w}}}" if i not in (7, 11) else f"{{:<{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*head).rstrip(), fmt.format(*("-" * w for w in widths)).rstrip()] + [
        fmt.format(*r).rstrip() for r in out
    ]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from emulation.served import ServedNetwork, ServedNetworkError, record_of

    state_path: Path = args.state or default_state()
    try:
        state = State.load(state_path)
        record = record_of(state.served, state_path)
    except (StateError, ServedNetworkError) as ex:
        raise ByHandError(str(ex)) from ex
    net = ServedNetwork(record)
    m, plan, hosts = choose(args, state, net.model)
    try:
        net.check(hosts)
        config = ExperimentConfig(
            topology=record.topology,
            host_counts=(len(hosts),),
            sizes=(args.size,),
            methods=(m.name,),
            reps=args.reps,
            warmup=args.warmup,
            backend=record.backend,
            shape=LinkShape(bw_mbps=record.bw_mbps),
            slots=plan.spec.slots if plan else 128,
            input_kind=args.input,
            seed=args.seed,
            name="byhand",
        )
    except (ServedNetworkError, ConfigError) as ex:
        raise ByHandError(str(ex)) from ex
    prime = prime_size(plan, args.size) if plan else 0
    calls = config.iterations + (1 if prime else 0)
    if calls > MAX_CALLS:
        raise ByHandError(f"--reps + --warmup is {config.iterations}: at most {MAX_CALLS - 1} per run (8-bit epochs)")
    first_epoch = reserve_epochs(state_path, plan, calls) if plan else None
    log_dir = state_path.parent / "logs" / datetime.now().strftime("allreduce-%Y%m%d-%H%M%S")
    log_dir.mkdir(parents=True, exist_ok=True)
    rate_bps = (record.bw_mbps or 0.0) * 1e6
    ring_order = [hosts[i] for i in topology_order([net.model.host(h).switch for h in hosts])]
    t_path = tuple(
        bounds.path_bound(
            m,
            elements=args.size,
            rate_bps=rate_bps,
            delay_s=0.0,
            plan=plan,
            slots=config.slots,
            topo=net.model,
            ring_order=ring_order,
            exponent_rounds=rounds,
        )
        for rounds in (True, False)
    )
    samples: list[Sample] = []
    problems: list[str] = []
    with short_tmpdir() as sock_dir:
        runner = Runner(config, net, None, log_dir, sock_dir)
        tmo = timeouts(config)
        ticket = (
            job_ticket(plan, install=0, timeout_s=tmo["inc"], first_epoch=first_epoch) if plan is not None else None
        )
        with runner.agents(hosts, "byhand") as server:
            try:
                if prime:  # every slot once, not measured
                    rows = runner.run_step(server, m, hosts, prime, 0, 0, ticket, t_path)
                    problems += [
                        f"the opening all-reduce of every slot: rank {s.rank}: {s.error}" for s in rows if s.error
                    ]
                if not problems:
                    for rep in range(config.iterations):
                        samples += runner.run_step(server, m, hosts, args.size, rep, 0, ticket, t_path)
            except StepFailed as ex:
                msg, rows = ex.args
                samples += rows if rows and rows[0].elements == args.size else []
                problems.append(msg)
    summary = analysis.summarize(config, samples, problems=problems)
    return {
        "ok": bool(summary["ok"]),
        "method": m.name,
        "job": None if plan is None else plan.to_dict(),
        "hosts": list(hosts),
        "elements": args.size,
        "reps": args.reps,
        "warmup": args.warmup,
        "first_epoch": first_epoch,
        "network": {
            "topology": record.topology,
            "backend": record.backend,
            "bw_mbps": record.bw_mbps,
            "pid": record.runner.pid,
        },
        "logs": str(log_dir),
        "problems": problems,
        "rows": [jsonable(asdict(s)) for s in samples],
        "summary": summary,
        "_samples": samples,
    }


def _reps(n: int) -> str:
    return f"{n} repetition{'' if n == 1 else 's'}"


def text(out: dict[str, Any]) -> str:
    samples: list[Sample] = out["_samples"]
    net = out["network"]
    job = out["job"]
    spec = job["spec"] if job else None
    via = (
        f"through job {spec['job_id']} (root {job['root']}, {len(job['switches'])} switches; {spec['up_lanes']} up, "
        f"{spec['down_lanes']} down, shift {spec['shift']}, {spec['slots']} slots; epochs from {out['first_epoch']})"
        if spec
        else "host to host over IPv4"
    )
    lines = [
        f"{out['method']} {via} on {','.join(out['hosts'])}",
        f"{net['topology']} served by pid {net['pid']} ({net['backend']} switch, links "
        f"{format(net['bw_mbps'], 'g') + ' Mbit/s' if net['bw_mbps'] else 'unshaped'}); "
        f"{human_size(out['elements'])} float32 elements, {_reps(out['reps'])} after {out['warmup']} warm-up (w)",
        "",
        *per_rank_table(samples, tuple(out["hosts"]), out["warmup"]),
        "",
        *report.bounds_table(out["summary"]),
    ]
    point = next(iter(out["summary"]["points"]), None)
    for p in out["problems"] + (point["problems"] if point else []):
        lines.append(f"problem: {p}")
    if out["ok"] and point:
        lo, hi = point["ci95_latency_s"]
        lines.append(
            f"ok: true (median {point['median_latency_s'] * 1e3:.2f} ms [{lo * 1e3:.2f}-{hi * 1e3:.2f}] over "
            f"{_reps(point['reps'])}; every rank the same sum, rel. L2 {point['rel_l2_error']:.3g} within "
            f"{point['rel_l2_target']:.3g}, every element within its bound)"
        )
    else:
        lines.append(f"ok: {'true' if out['ok'] else 'false'} (agent logs in {out['logs']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    setup_logging(args.verbose)
    if args.reps < 1 or args.warmup < 0 or args.seed < 0:
        print(f"{prog}: error: --reps must be >= 1, --warmup and --seed >= 0", file=sys.stderr)
        return 2
    if needs_root(prog):
        return 2
    tear_down_on_sigterm()
    try:
        out = run(args)
    except ByHandError as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (the agents were stopped; the network is still up)", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps({k: v for k, v in out.items() if not k.startswith("_")}, indent=1))
    else:
        print(text(out))
    return 0 if out["ok"] else 1
