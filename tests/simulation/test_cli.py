"""`python -m simulation` and `p4ina simulate`: results folder, refusals that name the problem, the notebook."""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from simulation.cli import main, parse_topologies
from simulation.model import Outcome, Row, Scenario
from simulation.report import summary
from tests.simulation.conftest import needs_simgrid

REPO = Path(__file__).resolve().parents[2]


def _folder(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return folder


@needs_simgrid
def test_a_custom_grid_writes_config_raw_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    rc = main(
        [
            "--topology",
            "fat-tree:4,clos:radix=16",
            "--gpus",
            "8,16",
            "--sizes",
            "4KiB,1MiB",
            "--methods",
            "ring-1nic,tree-1nic,inc-int8,adaptive",
            "--no-validate",
            "--no-progress",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    folder = _folder(tmp_path)
    for name in ("config.json", "raw.csv", "summary.json", "table.txt"):
        assert (folder / name).exists(), name
    rows = list(csv.DictReader((folder / "raw.csv").open()))
    assert len(rows) == 2 * 2 * 2 * 4  # topologies x GPU counts x sizes x methods
    adaptive = [r for r in rows if r["method"] == "adaptive"]
    assert all(r["choice"] in ("ring-1nic", "tree-1nic", "inc-int8") for r in adaptive)
    s = json.loads((folder / "summary.json").read_text())
    assert s["max_gpus"] == 16 and s["validation"] == {}
    out = capsys.readouterr().out
    assert "inc-int8" in out
    # what it assumed: each preset with its link rates, in the table's header, the summary and the last line
    presets = {p["name"]: p for p in s["presets"]}
    assert presets["h100"]["nic_bit_s"] == 400e9 and presets["emulation"]["nic_bit_s"] == 2e6
    assert presets["h100"]["used_by"] == {"custom": ["clos:radix=16"]}
    table = (folder / "table.txt").read_text().splitlines()
    assert table[0].startswith("preset emulation: links (each direction) NIC 2 Mbit/s per GPU")
    assert table[1].startswith("preset h100: links (each direction) NIC 400 Gbit/s per GPU")
    assert "size/GPU: bytes of float32 gradient per GPU" in table[2] and "size/GPU" in table[3]
    assert "presets emulation; h100)" in out
    # a custom grid draws the default run's plots where they apply, and says why the others do not
    assert (folder / "scaling_time.png").exists() and (folder / "fabrics.png").exists()
    assert not (folder / "placement.png").exists() and "placement" in s["plots"]["placement.png"]
    assert s["findings"]["scaling"]["gpus"] == 16
    assert set(s["findings"]["scaling"]["topologies"]) == {"fat-tree:4", "clos:radix=16"}
    assert "--placement contiguous,scattered" in s["findings"]["not_applicable"]["placement"]
    assert "not in this run's findings: placement:" in out


@needs_simgrid
def test_sizes_say_their_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """Bytes (64KiB) or float32 elements (16Ki-elem, or --elements 16K); a bare 4K (bytes here, elements in
    emulate) is refused in one line, as are sizes for a sweep that has its own."""
    base = ["--topology", "clos:radix=16", "--gpus", "16", "--methods", "ring-1nic", "--no-validate", "--no-progress"]
    assert main([*base, "--sizes", "4K", "--out", str(tmp_path / "a")]) == 2  # bad input: exit 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "p4ina simulate: error: size '4K' has no unit (bytes or float32 elements?): write 4KiB or 4Ki-elem"
    ]
    assert not (tmp_path / "a").exists()  # refused before anything ran
    assert main(["--sizes", "4KiB", "--no-validate", "--out", str(tmp_path / "b")]) == 2
    assert "give --topology too" in capsys.readouterr().err
    for i, sizes in enumerate((["--sizes", "16KiB,1Ki-elem"], ["--elements", "4K,1024"])):
        assert main([*base, *sizes, "--out", str(tmp_path / f"c{i}")]) == 0
        rows = list(csv.DictReader((_folder(tmp_path / f"c{i}") / "raw.csv").open()))
        assert sorted(int(r["size"]) for r in rows) == [4096, 16384], sizes  # bytes per GPU


@needs_simgrid
def test_one_spelling_per_builder(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """clos: the Clos sized to the GPUs; fat-tree:K the controller's k-ary fat-tree. The old 'fattree' still works,
    with one deprecation line; the controller's name with the Clos's options is refused, naming both."""
    base = ["--gpus", "16", "--methods", "ring-1nic", "--sizes", "64KiB", "--no-validate", "--no-progress"]
    assert main(["--topology", "fattree:radix=16", *base, "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "p4ina simulate: warning: topology 'fattree:radix=16': 'fattree' is deprecated, write 'clos:radix=16' "
        "(the folded-Clos fat-tree sized to the GPUs; fat-tree:K is the controller's k-ary fat-tree)"
    ]
    (row,) = csv.DictReader((_folder(tmp_path / "a") / "raw.csv").open())
    assert row["topology"] == "clos:radix=16" and row["fabric"].startswith("clos:")
    assert main(["--topology", "fat-tree:radix=64", *base, "--out", str(tmp_path / "b")]) == 2
    assert (
        "fat-tree:K is the controller's topology (the emulation's); for a fat-tree sized to the GPUs write "
        "clos:radix=64" in capsys.readouterr().err
    )
    # the single-NIC ring's old name: still run, under its new one, with one deprecation line
    old = ["--topology", "clos:radix=16", "--gpus", "16", "--methods", "ring", "--sizes", "64KiB", "--no-validate"]
    assert main([*old, "--no-progress", "--out", str(tmp_path / "c")]) == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "p4ina simulate: warning: method 'ring' is now 'ring-1nic': one ring or tree through every GPU drives one "
        "NIC of a server at a time; NCCL as it runs on multi-NIC servers is nccl-ring, nccl-tree and nccl"
    ]
    (row,) = csv.DictReader((_folder(tmp_path / "c") / "raw.csv").open())
    assert row["method"] == "ring-1nic"


@needs_simgrid
def test_methods_with_different_bytes_but_equal_times_come_with_the_reason(tmp_path: Path):
    """inc-int8 sends 319-byte frames, inc-int32 1087: on a Dragonfly+ job over several groups they still take the
    same time, because the tree is unbalanced and the partial sums between switches stay int32. The report says so;
    on a Clos fabric (balanced trees) int8 is faster and there is nothing to explain."""
    args = ["--gpus", "1024", "--methods", "inc-int32,inc-int8", "--sizes", "256MiB", "--no-validate", "--no-progress"]
    assert main(["--topology", "dragonfly+:radix=16,clos:radix=16", *args, "--out", str(tmp_path)]) == 0
    folder = _folder(tmp_path)
    notes = json.loads((folder / "summary.json").read_text())["notes"]
    assert len(notes) == 1, notes
    (note,) = notes
    assert note.startswith("custom on dragonfly+:radix=16 (256 MiB at 1,024 GPUs): inc-int32 = inc-int8 within 1%")
    assert "frames on the hosts' links are 1087, 319 bytes" in note
    assert "between switches, where every one of them sends int32 partial sums in 1087-byte frames" in note
    assert "unbalanced" in note
    assert f"note: {note}" in (folder / "table.txt").read_text()


def test_summary_carries_the_validation_figures_and_the_largest_job():
    row = Row(
        "scaling", "rail:radix=128", "rail", 100_000, 1, 0, "contiguous", 0.0, "", "ring-1nic", 1 << 20, 0.5, 2e6, 4e6
    )
    outcome = Outcome(Scenario(), [row], {"gpus": 100_000})
    v = {
        "emulation_max_rel_error": 0.09,
        "closed_form_max_rel_error": 0.0,
        "sharp_anchor_rel_error": 0.01,
        "phase_vs_full_max_rel_error": 0.04,
    }
    s = summary([outcome], v, 1.0)
    assert s["max_gpus"] == 100_000 and s["validation"]["max_gpus"] == 100_000
    assert set(v) <= set(s["validation"])


@needs_simgrid
def test_preset_parameters_can_be_replaced_and_unknown_ones_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    base = [
        "--topology",
        "clos:radix=16",
        "--gpus",
        "64",
        "--methods",
        "inc-int32",
        "--sizes",
        "8B",
        "--no-validate",
        "--no-progress",
        "--json",
        "--out",
    ]
    assert main([*base, str(tmp_path / "a")]) == 0
    assert main([*base, str(tmp_path / "b"), "--set", "switch_latency=1.3e-6"]) == 0
    times = [float(next(csv.DictReader((_folder(tmp_path / d) / "raw.csv").open()))["time_s"]) for d in "ab"]
    # leaf, root spine, leaf: three traversals a round trip; one round: a single chunk's exponent is guessed
    # from the previous all-reduce (the steady state; hosts.inc_worker), so no exponent round opens the slot
    assert times[1] - times[0] == pytest.approx(3 * (1.3e-6 - 0.13e-6), rel=0.01)
    assert main([*base, str(tmp_path / "c"), "--set", "warp_speed=9"]) == 2  # refused before anything runs
    assert "warp_speed" in capsys.readouterr().err and not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "args, message, status",
    [
        (["--topology", "torus:4", "--gpus", "64"], "unknown topology", 2),
        (["--topology", "fat-tree:3"], "fat-tree:3", 2),
        (["--topology", "fat-tree:4", "--gpus", "32"], "--gpus 32: fat-tree:4 has 16 hosts", 2),
        (["--topology", "clos:radix=16", "--gpus", "2048"], "holds 1024 GPUs", 2),
        (["--topology", "clos:radix=16,tiers=2", "--gpus", "256"], "2-tier fat-tree of radix 16 holds 128 GPUs", 2),
        (["--topology", "dragonfly+:radix=16", "--gpus", "8192"], "joins at most 65 groups (4160 GPUs)", 2),
        (["--topology", "fat-tree:4", "--methods", "ring,telepathy"], "telepathy", 2),
        (["--topology", "rail:radix=16", "--gpus", "60"], "8-GPU servers", 2),
        (["--topology", "fat-tree:4", "--preset", "nonesuch"], "unknown preset", 2),
        (["--topology", "fat-tree:4", "--background", "1.5"], "background load", 2),
        (["--check", "tests/simulation/data/emulation-k4-held-out"], "give --calibrate too", 2),
    ],
)
def test_invalid_configurations_are_refused_naming_the_problem(
    tmp_path: Path, args: list[str], message: str, status: int, capsys: pytest.CaptureFixture[str]
):
    """Bad input is refused before anything runs or is written (exit 2), a GPU count a builder cannot hold
    included."""
    assert main([*args, "--no-validate", "--no-progress", "--out", str(tmp_path)]) == status
    assert message in capsys.readouterr().err
    if status == 2:
        assert not any(tmp_path.iterdir()), "a refused command wrote a results folder"


def _four_host_part(out: Path, src: Path = REPO / "tests/simulation/data/emulation-k4/sweep") -> Path:
    """A sweep fixture's 4-host points only (21 of 63): the CLI's plumbing is under test here, and the fit of
    the whole fixture, with its 15% claim, is test_validation's (fitting all 63 points cost the suite ~50 s)."""
    out.mkdir()
    (out / "config.json").write_text((src / "config.json").read_text())
    summary = json.loads((src / "summary.json").read_text())
    summary["points"] = [p for p in summary["points"] if int(p["hosts"]) == 4]
    summary["methods"] = {m: {h: v for h, v in per.items() if int(h) == 4} for m, per in summary["methods"].items()}
    (out / "summary.json").write_text(json.dumps(summary))
    with (src / "raw.csv").open() as fh, (out / "raw.csv").open("w", newline="") as dst:
        reader = csv.DictReader(fh)
        writer = csv.DictWriter(dst, fieldnames=list(reader.fieldnames or []))
        writer.writeheader()
        writer.writerows(r for r in reader if int(r["hosts"]) == 4)
    return out


@needs_simgrid
def test_p4ina_simulate_calibrates_from_a_results_folder(tmp_path: Path):
    folder = _four_host_part(tmp_path / "results")
    later = _four_host_part(tmp_path / "later", REPO / "tests/simulation/data/emulation-k4-held-out/sweep-3")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "p4ina",
            "simulate",
            "--calibrate",
            str(folder),
            "--check",
            str(later),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "over 21 points" in proc.stdout and "held out: max |error|" in proc.stdout
    fitted = json.loads((_folder(tmp_path / "out") / "calibration.json").read_text())
    assert fitted["preset"]["name"] == "emulation-calibrated"
    table = fitted["table"]
    assert len(table) == 21 and {r["hosts"] for r in table} == {4}
    link = [abs(r["rel_error"]) for r in table if r["bound"] == "link"]
    assert link and fitted["by_bound"]["link"]["points"] == len(link)
    assert fitted["by_bound"]["link"]["max_rel_error"] == pytest.approx(max(link))
    assert max(link) <= 0.15  # the points that are statements about the network
    held = fitted["held_out"]  # predicted with the fitted costs, not fitted to
    assert len(held) == 21 and {r["folder"] for r in held} == {"later"}
    assert fitted["held_out_max_rel_error"] == pytest.approx(max(abs(r["rel_error"]) for r in held))


def _few_points(out: Path, src: Path = REPO / "tests/simulation/data/emulation-k4/sweep") -> Path:
    """The sweep fixture's 4-host 1Ki points of four methods: 4 points, fewer than the 9 costs the fit has."""

    def keep(r: dict) -> bool:
        return int(r["hosts"]) == 4 and int(r["elements"]) == 1024 and r["method"] in ("ring", "tree", "inc-int32")

    out.mkdir()
    (out / "config.json").write_text((src / "config.json").read_text())
    summary = json.loads((src / "summary.json").read_text())
    summary["points"], summary["methods"] = [p for p in summary["points"] if keep(p)], {}
    (out / "summary.json").write_text(json.dumps(summary))
    with (src / "raw.csv").open() as fh, (out / "raw.csv").open("w", newline="") as dst:
        reader = csv.DictReader(fh)
        writer = csv.DictWriter(dst, fieldnames=list(reader.fieldnames or []))
        writer.writeheader()
        writer.writerows(r for r in reader if keep(r))
    return out


@needs_simgrid
def test_a_fit_of_more_costs_than_points_warns_naming_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    folder = _few_points(tmp_path / "few")
    assert main(["--calibrate", str(folder), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("warning: under-determined fit: 9 free parameters fitted to 3 points;")
    fitted = json.loads((_folder(tmp_path / "out") / "calibration.json").read_text())
    assert (fitted["free_parameters"], fitted["points"]) == (9, 3) and len(fitted["warnings"]) == 1
    assert main(["--calibrate", str(folder), "--json", "--out", str(tmp_path / "json")]) == 0
    assert "warning: under-determined fit: 9 free parameters fitted to 3 points" in capsys.readouterr().err


def test_the_simulation_plots_label_log_axes_in_plain_numbers():
    from simulation import report

    rows = [
        Row("scaling", "clos:radix=16", "clos", n, 1, 0, "contiguous", 0.0, "", m, 1 << 20, t * n, 1.0, 1.0)
        for n in (16, 64, 256, 1024)
        for m, t in (("ring-1nic", 1e-5), ("inc-int32", 3e-8))
    ]
    fig = report.plot_scaling(rows)
    fig.canvas.draw()
    ax = fig.axes[0]
    xs = [t.get_text() for t in ax.xaxis.get_ticklabels(which="both") if t.get_text()]
    ys = [t.get_text() for t in ax.yaxis.get_ticklabels(which="both") if t.get_text()]
    assert xs == ["16", "64", "256", "1,024"]  # the GPU counts simulated
    assert ys and all(y.endswith(("ns", "us", "ms", " s")) for y in ys) and not any("^" in y or "$" in y for y in ys)


@needs_simgrid
def test_the_notebook_reproduces_the_figures_headless(tmp_path: Path):
    nb = nbformat.read(REPO / "notebooks" / "04_simulation.ipynb", as_version=4)
    os.environ["P4INA_SIM_NOTEBOOK_SMALL"] = "1"
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    finally:
        os.environ.pop("P4INA_SIM_NOTEBOOK_SMALL", None)
    images = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    ]
    assert len(images) >= 4
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "scattered / contiguous" in text and "inc-int32" in text


def test_a_builders_options_stay_with_their_topology() -> None:
    """--topology is comma-separated and so are a builder's key=value options: each option joins the topology
    before it, a controller topology or a JSON never takes one."""
    assert parse_topologies("clos:radix=16,tiers=2,oversub=2,rail,dragonfly+:radix=8") == (
        "clos:radix=16,tiers=2,oversub=2",
        "rail",
        "dragonfly+:radix=8",
    )
    assert parse_topologies("fat-tree:4,clos,tiers=2") == ("fat-tree:4", "clos:tiers=2")
    assert parse_topologies("my.json, leaf-spine:2x2x2") == ("my.json", "leaf-spine:2x2x2")
    with pytest.raises(argparse.ArgumentTypeError, match="'tiers=2' is an option of no topology"):
        parse_topologies("tiers=2,clos:radix=16")
