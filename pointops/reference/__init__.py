"""Slow, exact pure-PyTorch definitions of the pointops operators, one module per family.

Each function states an op's semantics in the plainest code that computes it; the tests compare
the kernels with it, and tools/bench.py times it as the plain-PyTorch baseline where it is
vectorized enough to be the way a user would write the op.
"""
