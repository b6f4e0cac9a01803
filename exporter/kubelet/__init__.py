"""kubelet PodResources client and device-id parsing."""
