"""Shared pytest configuration: the real-cluster testbed fixtures (see docs/testing.md)."""

pytest_plugins = ["kubeacc.testbed.pytest_plugin"]
