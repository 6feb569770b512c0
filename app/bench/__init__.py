"""Benchmarks behind `hearth bench ...`: numbers and ratios measured side by side in one run."""
