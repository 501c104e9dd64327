"""Where the attention core runs: CUDA when there is a GPU, else the CPU."""

from __future__ import annotations

import torch


def pick_device(preference: str = "auto") -> torch.device:
    """`auto` takes CUDA when available; `cpu`, `cuda`, `cuda:1` … are taken as asked."""
    if preference == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(preference)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {preference!r} was asked for but CUDA is not available")
    return device
