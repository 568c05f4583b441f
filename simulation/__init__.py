"""Cluster-scale simulation of p4ina's all-reduce methods on SimGrid (`p4ina simulate`, `python -m simulation`).

Three layers, as in ASTRA-sim: the workload (what is all-reduced: message
sizes, jobs, placement), the system (the collective algorithms in
`simulation.methods`, each written once as phases of concurrent flows) and
the network (a fabric as data in `simulation.fabric`, whose per-flow rates
under max-min sharing SimGrid computes in `simulation.engine`).  See
docs/simulation.md for the design and why.
"""
