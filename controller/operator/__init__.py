"""The kopf operator: handlers, settings and the `run` command."""
