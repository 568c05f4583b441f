"""Host side of p4ina: the aggregation header as a Scapy layer, fixed-point
quantization, the in-network all-reduce worker and the ring all-reduce baseline.

Importing this package does not import Scapy; ``hosts.agg_layer`` does.
"""
