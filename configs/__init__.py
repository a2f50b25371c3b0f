"""Installed as `jobs.configs` (pyproject.toml `package-dir`): the shipped job configs and row templates.
jobs/defaults.py finds them; this directory holds data, no code."""
