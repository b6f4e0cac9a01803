"""Tenant resolution: the configurable rules and who a pod belongs to, from its labels and the Kubernetes API."""
