"""Simulated GPU fleet: deterministic from a seed, evaluated at any virtual timestamp."""
