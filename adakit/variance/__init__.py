"""Readings across runs: the noise floor, sequence similarity and the measured behaviour of the local agents."""
