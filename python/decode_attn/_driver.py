"""Loads the CUDA driver before the native extension, which links
`libcuda.so.1`: the machine's driver where there is one, else the
package's stand-in (`_nodriver/libcuda.so.1`, every call answering
CUDA_ERROR_NO_DEVICE). The stand-in is loaded only after the real driver
failed to load, so it can never shadow it; with it, `import decode_attn`
and every CPU-side check work on a machine without a GPU, and the first
GPU call raises a clear `RuntimeError`.
"""

import ctypes
import os

_STAND_IN = os.path.join(os.path.dirname(__file__), "_nodriver", "libcuda.so.1")


def load_driver() -> str:
    """'driver' or 'stand-in': which libcuda.so.1 the extension will use."""
    try:
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
        return "driver"
    except OSError:
        ctypes.CDLL(_STAND_IN, mode=ctypes.RTLD_GLOBAL)
        return "stand-in"
