"""The packages of the p4ina distribution, their data, and the compiled P4 program; the rest is in pyproject.toml.

This is here, not in pyproject.toml, for one line: the compiled P4 program ships inside the package as
`controller.program`, a data-only package whose directory is p4/build. p4/build stays the one committed copy
(scripts/build_p4.py writes it, its manifest guards it); a wheel and an sdist take the files from there, and
`controller.api` finds them in either place (controller/program in an installed package, p4/build in a
checkout, an editable install included). pyproject.toml can map a package onto another directory
(package-dir) but cannot add it to packages found by `packages.find`, and p4/ must not become a package (the
p4runtime bindings own the Python namespace `p4`), so the list is built here.
"""

from setuptools import find_namespace_packages, setup

TOP_LEVEL = (
    "p4proto",
    "wireformat",
    "native",
    "controller",
    "hosts",
    "softswitch",
    "emulation",
    "experiments",
    "simulation",
)
TOP_LEVEL += ("bench", "p4ina")
PROGRAM = "controller.program"  # the compiled P4 program, from p4/build (not a Python package: data only)

setup(
    packages=[
        *find_namespace_packages(include=[pattern for name in TOP_LEVEL for pattern in (name, f"{name}.*")]),
        PROGRAM,
    ],
    package_dir={PROGRAM: "p4/build"},
    package_data={
        "wireformat": ["*.toml"],
        # the published format of topology files (controller.toposchema checks every file against it)
        "controller": ["topology.schema.json"],
        # C that is compiled on the machine at run time: the switch's engine and port loop, the agents' stream loop
        "softswitch.runtime": ["c/*.c", "c/*.h"],
        "hosts": ["c/*.c", "c/*.h"],
        # published nccl-tests figures the NCCL model is validated against (simulation/nccl_anchors.py)
        "simulation": ["data/*.json"],
        PROGRAM: ["p4ina.json", "p4ina.p4info.txtpb", "manifest.json"],
    },
)
