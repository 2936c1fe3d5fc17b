"""oomharness's Python side, one package (in the wheel of the top-level pyproject.toml, or alone from
python/pyproject.toml): the probe (oomharness.probe) that tells the
harness what a PyTorch job is doing, reference recovery code (oomharness.recover) that does what the usual
OOM advice says, the virtual CUDA device (oomharness.virtual_device, oomharness.virtual_device.allocator), the
`oomharness` command from Python (oomharness.harness) and the pytest plugin (oomharness.pytest_plugin).

Importing the package imports nothing else: sitecustomize.py imports it in every Python process of a job.
"""

__all__ = ["probe", "recover", "virtual_device", "caching_allocator", "harness", "pytest_plugin"]
