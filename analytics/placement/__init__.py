"""Placement by topology and Kueue topology-aware scheduling: spread, stranded capacity, TAS advice."""
