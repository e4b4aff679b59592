"""The benchmark suite: ``python bench/compare.py`` (see docs/benchmarks.md)."""
