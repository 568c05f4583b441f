"""Link impairments applied with tc inside a namespace: random loss, duplication, reordering, and their counters.

Each function takes `run(*cmd)`, which executes a command in the device's namespace, so the same code
serves the Mininet network (emulation.network) and the tests' own namespaces (emulation.netns.NetnsLab).
"""

from __future__ import annotations

from collections.abc import Callable

from emulation.commands import NetnsError


def _sink_filter(run: Callable[..., str], dev: str, hook: str, program: str, sink: str, pref: int | None) -> None:
    """A classic-BPF filter on dev's clsact `hook` redirecting what `program` matches to `sink` (a down veth:
    gone). pref None: tc picks one."""
    where = [hook] if pref is None else [hook, "pref", str(pref)]
    run("tc", "filter", "add", "dev", dev, *where, "bpf", "bytecode", program, "action", "mirred", "egress",
        "redirect", "dev", sink)  # fmt: skip


def add_random_loss(run: Callable[..., str], dev: str, fraction: float, sink: str) -> str:
    """Drop `fraction` of the packets leaving `dev` at random, with `run(*cmd)` executing in dev's namespace.

    tc netem where the kernel has it; otherwise (kernels built without
    sch_netem, and here without the gact "drop" action too) a classic-BPF tc
    filter draws the kernel's random number per packet and redirects the
    unlucky ones to `sink`, a veth created here and left down.  Composes with
    an HTB rate limit on the same device (clsact is separate from the root
    qdisc). Returns the method used.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"loss fraction must be in (0, 1), got {fraction}")
    try:
        run("tc", "qdisc", "add", "dev", dev, "root", "netem", "loss", f"{fraction * 100:.3f}%")
        return "netem"
    except NetnsError as ex:
        if "unknown" not in str(ex).lower():
            raise
    run("ip", "link", "add", sink, "type", "veth", "peer", "name", f"{sink[:13]}p")
    program = bpf_loss_program(fraction)
    run("tc", "qdisc", "add", "dev", dev, "clsact")
    _sink_filter(run, dev, "egress", program, sink, None)
    return "tc-bpf"


def bpf_loss_program(fraction: float) -> str:
    """Classic BPF for tc: match (drop) a packet when the kernel's random u32 is at or above (1 - fraction) 2^32."""
    threshold = min(int((1.0 - fraction) * 2**32), 2**32 - 1)
    # A = random u32 (SKF_AD_RANDOM); A >= threshold -> match (-1), else no match (0).
    return f"4,32 0 0 {2**32 - 4096 + 56},53 1 0 {threshold},6 0 0 0,6 0 0 {2**32 - 1}"


def set_bpf_loss(run: Callable[..., str], dev: str, fraction: float, sink: str, fresh: bool) -> None:
    """Make `fraction` of the packets leaving `dev` vanish (0: none), changeable while traffic flows.

    Always the tc BPF filter (also where netem exists, so a sweep can change the rate without touching the
    shaping qdiscs); `fresh`: the sink veth and the clsact qdisc are not there yet and are made here.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"loss fraction must be in [0, 1), got {fraction}")
    if fresh:
        run("ip", "link", "add", sink, "type", "veth", "peer", "name", f"{sink[:13]}p")
        run("tc", "qdisc", "add", "dev", dev, "clsact")
    else:
        _del_filter(run, dev, LOSS_PREF)
    if fraction > 0:
        _sink_filter(run, dev, "egress", bpf_loss_program(fraction), sink, LOSS_PREF)


def set_blackhole(run: Callable[..., str], dev: str, hook: str, on: bool, sink: str) -> None:
    """Make every frame through `dev`'s clsact `hook` ("ingress": arriving, "egress": leaving) vanish, or stop.

    A gray failure: the carrier stays up and nothing is reported, the frames just go. The clsact qdisc and the
    down `sink` veth must exist (set_bpf_loss made them); the filter runs before the random loss.
    """
    if hook not in ("ingress", "egress"):
        raise ValueError(f"hook {hook!r}: ingress or egress")
    _del_filter(run, dev, BLACKHOLE_PREF, hook)
    if on:
        _sink_filter(run, dev, hook, MATCH_ALL, sink, BLACKHOLE_PREF)


# clsact egress filters run by preference: loss first (a lost packet is neither duplicated nor held), then
# duplication; the reorder filter sits on the root HTB qdisc, which sees the packets after clsact
MATCH_ALL = "1,6 0 0 4294967295"  # classic BPF: return -1, every packet matches
BLACKHOLE_PREF = 5  # a gray failure's 100% loss, before everything else
LOSS_PREF = 10
DUP_PREF = 20
REORDER_PREF = 30
IN_ORDER_PREF = 40
REORDER_CLASS = "5:20"  # HTB class of held-back packets (emulation.shaping's tree: 5:1 the link, 5:10 in order)
IN_ORDER_CLASS = "5:10"


def _del_filter(run: Callable[..., str], dev: str, pref: int, *where: str) -> None:
    """Delete the filter of preference `pref` (absent is fine: nothing was set yet)."""
    try:
        run("tc", "filter", "del", "dev", dev, *(where or ("egress",)), "pref", str(pref))
    except NetnsError as ex:
        if "not find" not in str(ex).lower() and "no such" not in str(ex).lower():
            raise


def set_bpf_dup(run: Callable[..., str], dev: str, fraction: float) -> None:
    """Send a copy of `fraction` of the packets leaving `dev` (0: none), changeable while traffic flows.

    A classic-BPF filter on the clsact egress hook (which must exist) draws the kernel's random number and
    mirrors the lucky packets back into `dev` itself: the copy goes through the egress hook again (it may be
    lost or copied once more; mirred stops at a nesting depth of four) and then the link's own queue, right
    behind the original. No netem needed.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"duplication fraction must be in [0, 1), got {fraction}")
    _del_filter(run, dev, DUP_PREF)
    if fraction > 0:
        run(
            "tc",
            "filter",
            "add",
            "dev",
            dev,
            "egress",
            "pref",
            str(DUP_PREF),
            "bpf",
            "bytecode",
            bpf_loss_program(fraction),
            "action",
            "mirred",
            "egress",
            "mirror",
            "dev",
            dev,
        )


def reorder_classes(rate_bps: float, fraction: float, queue_pkts: int) -> list[list[str]]:
    """The tc commands that split a shaped link's HTB class 5:1 (emulation.shaping) into two children:

    5:10, priority 0, the link's full rate: where packets go by default (in order, as before);
    5:20, priority 7, a small rate with a burst of 1 byte: the held-back packets. HTB serves the
    higher priority first while both can send, and the small rate makes a held packet wait for its
    predecessors in that class (a packet costs size / rate of credit), so a held packet leaves after
    packets that came later: reordered, by a few frames up to tens of milliseconds.

    The held class's rate is four times the share the filter sends it (at least 8 kbit/s), so it
    never backs up for good. The link's rate stays the parent's ceiling.
    """
    slow = max(8000, int(4 * fraction * rate_bps))
    fast = int(round(rate_bps))
    return [
        [
            "tc",
            "class",
            "add",
            "dev",
            "{dev}",
            "parent",
            "5:1",
            "classid",
            IN_ORDER_CLASS,
            "htb",
            "rate",
            f"{fast}bit",
            "ceil",
            f"{fast}bit",
            "burst",
            "1514",
            "cburst",
            "1514",
            "quantum",
            "1514",
            "prio",
            "0",
        ],
        [
            "tc",
            "qdisc",
            "add",
            "dev",
            "{dev}",
            "parent",
            IN_ORDER_CLASS,
            "handle",
            "11:",
            "pfifo",
            "limit",
            str(queue_pkts),
        ],
        [
            "tc",
            "class",
            "add",
            "dev",
            "{dev}",
            "parent",
            "5:1",
            "classid",
            REORDER_CLASS,
            "htb",
            "rate",
            f"{slow}bit",
            "ceil",
            f"{slow}bit",
            "burst",
            "1",
            "cburst",
            "1",
            "quantum",
            "1514",
            "prio",
            "7",
        ],
        [
            "tc",
            "qdisc",
            "add",
            "dev",
            "{dev}",
            "parent",
            REORDER_CLASS,
            "handle",
            "12:",
            "pfifo",
            "limit",
            str(queue_pkts),
        ],
        # HTB's default class cannot change, and 5:1 is no leaf now: a catch-all filter after the reorder one
        [
            "tc",
            "filter",
            "add",
            "dev",
            "{dev}",
            "parent",
            "5:",
            "pref",
            str(IN_ORDER_PREF),
            "bpf",
            "bytecode",
            MATCH_ALL,
            "flowid",
            IN_ORDER_CLASS,
        ],
    ]


def set_reorder(
    run: Callable[..., str], dev: str, fraction: float, rate_bps: float, queue_pkts: int, split: bool
) -> bool:
    """Hold back `fraction` of the packets leaving `dev` behind later ones, while traffic flows; 0 puts the link
    back as emulation.shaping made it. Returns whether the link's class is split now (pass it back next time).

    `dev` must carry emulation.shaping's HTB tree (root 5:, class 5:1 with a pfifo 10: of `queue_pkts`);
    `split`: whether an earlier call split class 5:1 (reorder_classes). A classic-BPF classifier on the root
    qdisc draws the kernel's random number and sends the unlucky packets to the held-back class. Undoing the
    split drops what the two classes still hold: call it between all-reduces.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"reorder fraction must be in [0, 1), got {fraction}")
    if split:
        _del_filter(run, dev, REORDER_PREF, "parent", "5:")
    if fraction == 0:
        if split:
            _del_filter(run, dev, IN_ORDER_PREF, "parent", "5:")
            for classid in (REORDER_CLASS, IN_ORDER_CLASS):
                run("tc", "class", "del", "dev", dev, "classid", classid)
            # HTB makes a class whose last child went a leaf again, with a default queue: ours back
            run(
                "tc",
                "qdisc",
                "replace",
                "dev",
                dev,
                "parent",
                "5:1",
                "handle",
                "10:",
                "pfifo",
                "limit",
                str(queue_pkts),
            )
        return False
    if not split:
        for cmd in reorder_classes(rate_bps, max(fraction, 0.01), queue_pkts):
            run(*[dev if w == "{dev}" else w for w in cmd])
    run(
        "tc",
        "filter",
        "add",
        "dev",
        dev,
        "parent",
        "5:",
        "pref",
        str(REORDER_PREF),
        "bpf",
        "bytecode",
        bpf_loss_program(fraction),
        "flowid",
        REORDER_CLASS,
    )
    return True


def tc_counts(run: Callable[..., str], dev: str) -> dict[str, int]:
    """What the duplication and reorder stages of `dev` did so far: packets copied, packets held back."""
    out = {"duplicated": 0, "held": 0}
    try:
        filters = run("tc", "-s", "filter", "show", "dev", dev, "egress", "pref", str(DUP_PREF))
    except NetnsError:
        filters = ""
    # mirred counts a copy it could not send (its nesting limit: a copy of a copy of ...) as an overlimit
    sent, failed = _sent_line(filters)
    out["duplicated"] = sent - failed
    try:
        classes = run("tc", "-s", "class", "show", "dev", dev, "classid", REORDER_CLASS)
    except NetnsError:
        classes = ""
    out["held"] = _sent_pkts(classes)
    return out


def _sent_pkts(show: str) -> int:
    """The packet count of the first 'Sent N bytes M pkt' line of tc -s output (0 when there is none)."""
    return _sent_line(show)[0]


def _sent_line(show: str) -> tuple[int, int]:
    """(M, O) of the first 'Sent N bytes M pkt (dropped D, overlimits O ...)' line of tc -s output ((0, 0): none)."""
    words = show.split()
    for i, w in enumerate(words[:-4]):
        if w == "Sent" and words[i + 4] == "pkt":
            over = words[i + 8] if len(words) > i + 8 and words[i + 7] == "overlimits" else "0"
            return int(words[i + 3]), int(over)
    return 0, 0
