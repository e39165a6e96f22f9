"""The Blackwell class of the hardware catalog (issue 27, item 4): the loaded devices give the
figures of the datasheets their files cite, per GPU and dense, with the arithmetic from each
datasheet's board or rack total; and each file says what it leaves unconfirmed."""

from __future__ import annotations

import pytest

from rooflinec.spec import catalog
from rooflinec.spec import load as spec

T, G = 1e12, 1e9


def device(name: str) -> spec.Device:
    return spec.load_hardware(catalog.path("hardware", name))


@pytest.mark.parametrize(("name", "tensor", "fp32", "bandwidth", "capacity"), [
    # NVIDIA GB200 NVL72 datasheet, 72 GPUs, tensor figures with sparsity: FP16/BF16 360 PFLOPS,
    # FP8 720, INT8 720 POPS, FP4 1,440; dense = half, per GPU = / 72: 360e15 / 2 / 72 = 2.5e15,
    # 720e15 / 144 = 5e15, 1440e15 / 144 = 10e15. FP32 5,760 TFLOPS / 72 = 80e12.
    # HBM3e 576 TB/s / 72 = 8e12 B/s; 13.4 TB / 72 = 186.1e9 -> 186 GB.
    ("gb200", {"bf16": 2500, "fp16": 2500, "fp8": 5000, "int8": 5000, "fp4": 10000}, 80, 8000, 186),
    # NVIDIA GB300 NVL72 datasheet: FP4 1,080 PFLOPS dense / 72 = 15e15; FP8 720 (sparse) / 144 = 5e15;
    # FP16/BF16 360 / 144 = 2.5e15; 576 TB/s / 72 = 8e12; 288 GB HBM3e per GPU (20.7 TB / 72 = 287.5e9).
    ("gb300", {"bf16": 2500, "fp16": 2500, "fp8": 5000, "fp4": 15000}, 80, 8000, 288),
    # NVIDIA HGX B300 datasheet, 8 GPUs: FP4 108 PFLOPS dense / 8 = 13.5e15; FP8 72 (sparse) / 16 = 4.5e15;
    # FP16/BF16 36 / 16 = 2.25e15; FP32 600 TFLOPS / 8 = 75e12; 2.3 TB / 8 = 287.5e9 -> 288 GB.
    ("b300", {"bf16": 2250, "fp16": 2250, "fp8": 4500, "fp4": 13500}, 75, 8000, 288),
    # NVIDIA HGX B200 datasheet, 8 GPUs: FP16/BF16 36 PFLOPS sparse / 16 = 2.25e15, FP8 72 / 16 = 4.5e15,
    # FP4 144 / 16 = 9e15; 180 GB, 8 TB/s per GPU.
    ("b200", {"bf16": 2250, "fp16": 2250, "fp8": 4500, "int8": 4500, "fp4": 9000}, 80, 8000, 180),
])
def test_peaks_and_memory_are_the_datasheets(name, tensor, fp32, bandwidth, capacity):
    d = device(name)
    assert d.tensor == {k: v * T for k, v in tensor.items()}
    assert d.vector == {"fp32": fp32 * T}
    assert (d.bandwidth, d.capacity) == (bandwidth * G, capacity * G)
    assert d.warnings == ()   # inside every plausibility range


@pytest.mark.parametrize(("name", "domain", "network"), [
    # NVL72: 130 TB/s over 72 GPUs = 1.8 TB/s per GPU both ways -> 900 GB/s per direction, one NVLink
    # domain of 72. GB200: one 400 Gb/s ConnectX-7 per GPU (DGX GB200) = 50 GB/s; GB300: 72 ConnectX-8
    # SuperNICs at 800 Gb/s = 100 GB/s per GPU.
    ("gb200", 72, 50), ("gb300", 72, 100),
    # HGX boards: 8 GPUs per NVLink Switch domain, 1.8 TB/s per GPU both ways; B300's networking
    # 1.6 TB/s for 8 GPUs counted both ways = 8 x 800 Gb/s = 100 GB/s per GPU per direction.
    ("b300", 8, 100), ("b200", 8, 50),
])
def test_nvlink_domains_and_scale_out(name, domain, network):
    d = device(name)
    assert (d.link_bandwidth, d.link_domain) == (900 * G, domain)
    assert d.network_bandwidth == network * G
    assert d.link_latency and d.network_latency   # NCCL's cost model, named in the source


def test_b200_on_chip_figures_and_what_stays_unconfirmed():
    # CUDA C++ Programming Guide, compute capability 10.0: 256 KB L1 + shared per SM; 148 SMs reported
    # by the CUDA runtime (no datasheet states it: the source says so).
    b200, gb200 = device("b200"), device("gb200")
    assert (b200.sm_count, b200.sram_per_sm) == (148, 256 * 1024) == (gb200.sm_count, gb200.sram_per_sm)
    assert "no NVIDIA datasheet states the SM count" in b200.source
    for name in ("b300", "gb300"):   # the shipped SM count of Blackwell Ultra is unconfirmed: no tiles
        d = device(name)
        assert d.sm_count is None and "Unconfirmed" in d.source and "int8" not in d.tensor
    assert "Unconfirmed" in gb200.source and "192 GB per GPU" in gb200.source
