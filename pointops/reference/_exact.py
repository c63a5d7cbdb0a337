"""Exact scalar arithmetic for the references: what the kernels compute with fused multiply-adds
is computed here exactly (fractions) and rounded once, so a reference equals the kernels bit for
bit, not just to a tolerance."""

from fractions import Fraction

import numpy as np


def _round_to_float32(value: Fraction) -> float:
    """value rounded to the nearest float32 (ties to even)."""
    with np.errstate(over="ignore"):
        guess = np.float32(float(value))  # within one float32 ulp of the answer
    if not np.isfinite(guess):
        return float(guess)  # beyond float32's range
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]

    def rank(c):
        error = abs(Fraction(float(c)) - value) if np.isfinite(c) else Fraction(10**400)
        odd = int(np.array(c, dtype=np.float32).view(np.uint32)) & 1
        return (error, odd)

    return float(min(candidates, key=rank))


def fma(a: float, b: float, c: float, float64: bool) -> float:
    """a * b + c with a single rounding, in float64 or float32 (inputs already in that type)."""
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    return float(exact) if float64 else _round_to_float32(exact)
