"""Deterministic randomness: stable keys from names, and counter-based noise vectorized over time.

Nothing here keeps state: a value depends only on (seed, key, slot), so any timestamp can be evaluated
in any order and a one-element evaluation equals the same element of a long one.
"""

from __future__ import annotations

import hashlib

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_TO_UNIT = 1.0 / float(1 << 53)


def stable_key(seed: int, *parts: object) -> int:
    """A 64-bit key from the seed and names (stable across runs and Python versions)."""
    text = "\x1f".join([str(seed), *map(str, parts)])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def stable_unit(seed: int, *parts: object) -> float:
    """A float in [0, 1) from the seed and names."""
    return (stable_key(seed, *parts) >> 11) * _TO_UNIT


def stable_uuid(seed: int, *parts: object) -> str:
    """A UUID-formatted string (8-4-4-4-12 hex) from the seed and names."""
    h = hashlib.blake2b("\x1f".join([str(seed), *map(str, parts)]).encode(), digest_size=16).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def unit_noise(key: int | np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) per integer slot (splitmix64), as float64; ``key`` may be an array that broadcasts."""
    s = np.asarray(slots, dtype=np.int64).astype(np.uint64)
    k = np.asarray(key, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = _mix(s * _GOLDEN + k)
    return (x >> np.uint64(11)).astype(np.float64) * _TO_UNIT


def centered_noise(key: int | np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Noise in [-1, 1) per slot (sum of two uniforms, so it clusters near 0)."""
    other = np.asarray(key, dtype=np.uint64) ^ np.uint64(0x5DEECE66D)
    return unit_noise(key, slots) + unit_noise(other, slots) - 1.0
