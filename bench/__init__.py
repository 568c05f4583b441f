"""Benchmarks behind `make bench`; each `bench_*.py` module has `run() -> Figures`."""
