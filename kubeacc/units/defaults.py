"""The built-in unit table: one unit is one TFLOPS of dense FP16 throughput.

The figure is the vendor's published peak for dense FP16 (tensor cores where the chip has them,
the figure without structured sparsity). GPUs without fast FP16 (K40, P40) get their FP32 peak,
which is what FP16 work runs at on them. docs/extender.md lists every entry with its source.
"""

from __future__ import annotations

#: (name as an admin would write it, units, the published figure it comes from)
DEFAULT_UNITS: tuple[tuple[str, int, str], ...] = (
    ("K40", 4, "Tesla K40: 4.29 TFLOPS FP32 peak (GPU Boost); no faster FP16 rate"),
    ("K40m", 4, "as K40"),
    ("K40c", 4, "as K40"),
    ("P40", 12, "Tesla P40: 12 TFLOPS FP32 peak; FP16 runs far below FP32 on this chip"),
    ("V100", 125, "Tesla V100 SXM2: 125 TFLOPS tensor (deep learning)"),
    ("V100 PCIe", 112, "Tesla V100 PCIe: 112 TFLOPS tensor (deep learning)"),
    ("T4", 65, "Tesla T4: 65 TFLOPS mixed precision (FP16/FP32)"),
    ("A10", 125, "A10: 125 TFLOPS FP16 tensor (250 with sparsity)"),
    ("A100", 312, "A100 (SXM4 and PCIe): 312 TFLOPS FP16 tensor (624 with sparsity)"),
    ("L4", 121, "L4: 242 TFLOPS FP16 tensor with sparsity, 121 dense"),
    ("L40S", 362, "L40S: 362 TFLOPS FP16 tensor (733 with sparsity)"),
    ("H100", 989, "H100 SXM: 1,979 TFLOPS FP16 tensor with sparsity, 989 dense"),
    ("H100 PCIe", 756, "H100 PCIe: 1,513 TFLOPS FP16 tensor with sparsity, 756 dense"),
    ("H100 NVL", 835, "H100 NVL: 1,671 TFLOPS FP16 tensor with sparsity, 835 dense"),
    ("H200", 989, "H200 SXM: 1,979 TFLOPS FP16 tensor with sparsity, 989 dense"),
    ("H200 NVL", 835, "H200 NVL: 1,671 TFLOPS FP16 tensor with sparsity, 835 dense"),
    ("B200", 2250, "B200 (HGX B200): 4.5 PFLOPS FP16 tensor with sparsity, 2,250 TFLOPS dense"),
    ("KunLun K200", 64, "KunLun (1st generation) K200: 64 TFLOPS FP16, as Baidu announced"),
    ("KunLun R200", 128, "KunLun 2nd generation R200: 128 TFLOPS FP16, as Baidu announced"),
)

#: What one unit of the built-in table is.
DEFAULT_UNIT = "TFLOPS dense FP16"
