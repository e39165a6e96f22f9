"""`rooflinec measure`: time real kernels with PyTorch and place them on the roofline.

PyTorch is an optional dependency (`pip install -e '.[measure]'`); only this package imports
it, and only inside the functions that run on the device, so `build`, `check` and `explain`
never load it.
"""

from __future__ import annotations

from rooflinec.base.errors import RooflineError


def torch():
    """The torch module, or a clear error saying how to install it."""
    try:
        import torch as module
    except ImportError:
        raise RooflineError("rooflinec measure needs PyTorch: pip install -e '.[measure]'") from None
    return module


def local_device(torch_module, name: str | None = None, threads: int | None = None):
    """`name` (cpu, cuda, cuda:1), or CUDA when PyTorch sees a GPU, else the CPU; `threads`
    sets PyTorch's CPU threads (one thread needs one free core, not all of them at once)."""
    if threads:
        torch_module.set_num_threads(threads)
    if name is None:
        name = "cuda" if torch_module.cuda.is_available() else "cpu"
    try:
        device = torch_module.device(name)
    except RuntimeError as exc:
        raise RooflineError(f"--on {name}: not a PyTorch device ({exc}); use cpu or cuda") from None
    if device.type == "cuda" and not torch_module.cuda.is_available():
        raise RooflineError(f"--on {name}: PyTorch sees no CUDA GPU here; use cpu")
    if device.type not in ("cpu", "cuda"):
        raise RooflineError(f"--on {name}: only cpu and cuda are supported")
    return device


def describe(torch_module, device) -> str:
    """What ran the kernels, for a spec's `tool` and a report's header."""
    if device.type == "cuda":
        return f"PyTorch {torch_module.__version__} on cuda ({torch_module.cuda.get_device_name(device)})"
    return f"PyTorch {torch_module.__version__} on cpu, {torch_module.get_num_threads()} threads"
