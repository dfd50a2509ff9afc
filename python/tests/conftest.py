"""Shared fixtures: the GPU (skipping GPU tests where there is none, and
saying so), and a report the GPU tests append their measured errors to
(`$DECODE_ATTN_REPORT`, JSON lines) for the validation record."""

import json
import os

import pytest


def _gpu_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    import decode_attn

    if decode_attn.device_count() == 0 or not torch.cuda.is_available():
        return "no CUDA GPU"
    major, _ = torch.cuda.get_device_capability(0)
    if major != 9:
        return "the kernels are built for compute capability 9.0 (Hopper)"
    return None


GPU_SKIP = _gpu_reason()
needs_gpu = pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU test: {GPU_SKIP}")


@pytest.fixture(scope="session")
def report():
    path = os.environ.get("DECODE_ATTN_REPORT")

    def write(**record):
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(record) + "\n")

    return write
