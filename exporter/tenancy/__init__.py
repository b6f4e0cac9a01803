"""Tenant resolution from the Kubernetes API and the kubelet-backed allocation source."""
