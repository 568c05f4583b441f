"""Emulation layer: the embedded software switch, Mininet topologies and the experiment runner."""
