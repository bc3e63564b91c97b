"""Rendering of results for people and machines: text tables, plots, traces, JSON/CSV."""
