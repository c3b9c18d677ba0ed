"""Figures of the experiments (matplotlib, Agg backend, PNG files)."""
