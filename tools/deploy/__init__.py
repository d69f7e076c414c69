"""Deployment files: the image, compose, Kubernetes, dashboards and alerts (docs/deployment.md)."""
