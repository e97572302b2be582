"""HMMER's pipeline stages, one module per stage: each stage's parameters as HMMER holds them,
their layout for the kernels, and the host side of its decisions."""
