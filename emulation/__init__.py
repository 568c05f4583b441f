"""The Mininet network of P4 switches: nodes, links, shaping, impairments, namespaces, teardown, and the
local and served networks (docs/DESIGN.md). Experiments on it live in experiments/."""
