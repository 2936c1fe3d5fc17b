"""oomharness's Python side: the probe (oomharness.probe) that tells the harness what a PyTorch job is
doing, and reference recovery code (oomharness.recover) that does what the usual OOM advice says.

Importing the package imports nothing else: sitecustomize.py imports it in every Python process of a job.
"""

__all__ = ["probe", "recover"]
