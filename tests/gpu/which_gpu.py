#!/usr/bin/env python3
"""Prints which GPU this process sees (issue 33's packing check, tests/gpu/multigpu.sh): the count, the
PCI bus id of device 0 as the driver gives it, and CUDA_VISIBLE_DEVICES."""
import os

import torch

props = torch.cuda.get_device_properties(0)
bus = "%04x:%02x:%02x" % (getattr(props, "pci_domain_id", 0), getattr(props, "pci_bus_id", -1),
                          getattr(props, "pci_device_id", -1))
print("BUS", torch.cuda.device_count(), bus, os.environ.get("CUDA_VISIBLE_DEVICES", "-"), flush=True)
