"""Realistic Kubernetes objects for Claimline's demo cluster, tests and benchmarks.

Everything here is plain dicts shaped as ``kubectl get -o json`` prints them;
nothing imports Django, so the module can be used from tests and scripts alike.
"""
