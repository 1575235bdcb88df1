"""A small ``pci.ids`` in the real file's format, holding only what the profiles use.

Format (as in the pciutils database)::

    vendor  vendor_name
    \\tdevice  device_name
    \\t\\tsubvendor subdevice  subsystem_name
    C class  class_name
    \\tsubclass  subclass_name

Two spaces separate an id from its name. The names here are plain product descriptions.
"""

from __future__ import annotations

from collections.abc import Iterable

# vendor id -> (vendor name, {device id -> (device name, {(subvendor, subdevice) -> name})})
Catalog = dict[int, tuple[str, dict[int, tuple[str, dict[tuple[int, int], str]]]]]

CATALOG: Catalog = {
    0x1000: (
        "Broadcom / LSI",
        {
            0xC030: ("PEX89000 series PCIe Gen5 switch", {}),
        },
    ),
    0x1002: (
        "Advanced Micro Devices, Inc. [AMD/ATI]",
        {
            0x14A0: ("Instinct MI200 series switch upstream port", {}),
            0x14A1: ("Instinct MI200 series switch downstream port", {}),
            0x740F: ("Aldebaran [Instinct MI210]", {(0x1002, 0x0C34): "Instinct MI210 64GB"}),
        },
    ),
    0x1022: (
        "Advanced Micro Devices, Inc. [AMD]",
        {
            0x1480: ("EPYC root complex", {}),
            0x1483: ("EPYC PCIe general purpose bridge", {}),
        },
    ),
    0x10DE: (
        "NVIDIA Corporation",
        {
            0x22A3: ("GH100 [H100 NVSwitch]", {}),
            0x2330: ("GH100 [H100 SXM5 80GB]", {(0x10DE, 0x16C1): "H100 SXM5 80GB HBM3"}),
            0x20B2: ("GA100 [A100 SXM4 80GB]", {(0x10DE, 0x1463): "A100 SXM4 80GB"}),
            0x27B8: ("AD104GL [L4]", {(0x10DE, 0x16CA): "L4 24GB"}),
        },
    ),
    0x10EE: (
        "Xilinx Corporation",
        {
            0x5004: ("Alveo U250 XDMA platform, management function", {}),
            0x5005: ("Alveo U250 XDMA platform, user function", {}),
        },
    ),
    0x144D: (
        "Samsung Electronics Co Ltd",
        {
            0xA80A: ("NVMe SSD controller (PM9A3 / 980 PRO family)", {}),
        },
    ),
    0x14E4: (
        "Broadcom Inc. and subsidiaries",
        {
            0x165F: ("NetXtreme BCM5720 Gigabit Ethernet PCIe", {}),
        },
    ),
    0x15B3: (
        "Mellanox Technologies",
        {
            0x101D: ("MT2892 Family [ConnectX-6 Dx]", {}),
            0x101E: ("ConnectX Family mlx5Gen Virtual Function", {}),
            0x1021: ("MT2910 Family [ConnectX-7]", {(0x15B3, 0x0041): "ConnectX-7 NDR 400G OSFP"}),
        },
    ),
    0x1A03: (
        "ASPEED Technology, Inc.",
        {
            0x1150: ("AST1150 PCI-to-PCI bridge", {}),
            0x2000: ("ASPEED graphics family", {}),
        },
    ),
    0x1D0F: (
        "Amazon.com, Inc.",
        {
            0x8061: ("NVMe EBS controller", {}),
            0xEC20: ("Elastic Network Adapter (ENA)", {}),
            0xF000: ("AWS FPGA application physical function", {}),
            0xF001: ("AWS FPGA management physical function", {}),
        },
    ),
    0x1D22: (
        "Baidu Technology",
        {
            0x3684: ("KUNLUN AI accelerator R200", {}),
            0x3685: ("KUNLUN AI accelerator R200 virtual function", {}),
        },
    ),
    0x8086: (
        "Intel Corporation",
        {
            0x0958: ("Xeon Scalable host bridge", {}),
            0x09C4: ("PAC with Arria 10 GX FPGA", {}),
            0x0B30: ("PAC N3000 (FPGA programmable acceleration card)", {}),
            0x1237: ("440FX PCI and memory controller", {}),
            0x1533: ("I210 Gigabit Network Connection", {}),
            0x1593: ("Ethernet Controller E810-C for SFP", {}),
            0x1889: ("Ethernet Adaptive Virtual Function", {}),
            0x352A: ("Xeon Scalable PCIe root port", {}),
            0x56C0: ("ATS-M [Data Center GPU Flex 170]", {}),
        },
    ),
}

CLASSES: list[tuple[int, str, list[tuple[int, str]]]] = [
    (0x01, "Mass storage controller", [(0x08, "Non-Volatile memory controller")]),
    (0x02, "Network controller", [(0x00, "Ethernet controller"), (0x07, "Infiniband controller")]),
    (
        0x03,
        "Display controller",
        [
            (0x00, "VGA compatible controller"),
            (0x02, "3D controller"),
            (0x80, "Display controller"),
        ],
    ),
    (0x05, "Memory controller", [(0x80, "Memory controller")]),
    (0x06, "Bridge", [(0x00, "Host bridge"), (0x04, "PCI bridge"), (0x80, "Bridge")]),
    (0x12, "Processing accelerators", [(0x00, "Processing accelerators")]),
]

HEADER = (
    "#\n#\tList of PCI ID's (subset written for a synthetic kube-acc host)\n#\n"
    "# Syntax:\n# vendor  vendor_name\n#\tdevice  device_name\t\t\t\t<-- single tab\n"
    "#\t\tsubvendor subdevice  subsystem_name\t<-- two tabs\n\n"
)


def render(used: Iterable[tuple[int, int]] | None = None) -> str:
    """The file text; with ``used`` (vendor, device) pairs, only those vendors and devices."""
    wanted = None if used is None else set(used)
    out = [HEADER]
    for vendor in sorted(CATALOG):
        vname, devices = CATALOG[vendor]
        keep = [d for d in sorted(devices) if wanted is None or (vendor, d) in wanted]
        if not keep:
            continue
        out.append(f"{vendor:04x}  {vname}\n")
        for dev in keep:
            dname, subs = devices[dev]
            out.append(f"\t{dev:04x}  {dname}\n")
            for (sv, sd), sname in sorted(subs.items()):
                out.append(f"\t\t{sv:04x} {sd:04x}  {sname}\n")
    out.append("\n# List of known device classes, subclasses and programming interfaces\n\n")
    for cls, cname, subclasses in CLASSES:
        out.append(f"C {cls:02x}  {cname}\n")
        for sub, sname in subclasses:
            out.append(f"\t{sub:02x}  {sname}\n")
    return "".join(out)
