"""The NVIDIA driver's user space on a node: what a CUDA container needs from the host.

A CUDA image cannot carry the driver's libraries: ``libcuda.so`` and NVML must be the very
version of the loaded kernel module. So the version comes from the kernel module
(``/proc/driver/nvidia/version``, else ``/sys/module/nvidia/version``, read through the host),
and the files of that version from the driver root (``/`` for a driver installed on the host,
``/run/nvidia/driver`` for a driver container):

* libraries ``<dir>/lib<name>.so.<version>`` in the first library directory that holds
  ``libcuda.so.<version>`` (x86-64 and Arm64 multiarch directories, ``/usr/lib64``,
  ``/usr/lib``): the CUDA driver and NVML (both required), the PTX JIT compiler, NVVM and every
  other ``libnvidia-*`` of the version, with the names the container links by (``libcuda.so.1``,
  ``libcuda.so``...);
* the utilities (``nvidia-smi``, ``nvidia-debugdump``, ...), the GSP firmware
  (``/lib/firmware/nvidia/<version>``), the OpenCL/Vulkan/EGL ICD files, the persistenced and
  fabric manager sockets: each where present.

The control and UVM device nodes come with every GPU's own device nodes (discovery).
"""

from __future__ import annotations

import re

import msgspec

from kubeacc.discovery.backends.nvidia import PROC_VERSION
from kubeacc.host.files import HostRoot

SYS_VERSION = "/sys/module/nvidia/version"
LIBRARY_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib64",
)
#: Library name prefixes of the driver's user space (each ``<prefix>*.so.<version>``).
LIBRARY_PREFIXES = ("libcuda.", "libcudadebugger.", "libnvcuvid.", "libnvidia-", "libnvoptix.")
REQUIRED = ("libcuda.so", "libnvidia-ml.so")
#: The names a program links or opens by, for libraries whose host lacks the links.
LINK_NAMES = {
    "libcuda.so": ("libcuda.so.1", "libcuda.so"),
    "libnvidia-ml.so": ("libnvidia-ml.so.1",),
}
UTILITIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced")
BIN_DIRS = ("/usr/bin", "/usr/sbin", "/bin")
ICD_FILES = (
    "/etc/OpenCL/vendors/nvidia.icd",
    "/usr/share/vulkan/icd.d/nvidia_icd.json",
    "/etc/vulkan/icd.d/nvidia_icd.json",
    "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
)
SOCKETS = ("/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket")
_MODULE_RE = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]*)")
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)+$")


class DriverRootError(Exception):
    """The driver's user space cannot be found; the message names what and where."""


class NvidiaUserSpace(msgspec.Struct, frozen=True):
    """What a container of an NVIDIA GPU gets from the node; paths are in the driver root
    (and the same in the container)."""

    version: str
    library_dir: str
    libraries: tuple[str, ...]
    #: (link path, target name) in the library directory: ``libcuda.so.1 -> libcuda.so.<v>``.
    links: tuple[tuple[str, str], ...]
    utilities: tuple[str, ...] = ()
    firmware: str | None = None
    icd_files: tuple[str, ...] = ()
    sockets: tuple[str, ...] = ()
    #: Optional pieces not on this node (for the log and the self test).
    absent: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        """Every file and directory the container mounts read-only."""
        fw = (self.firmware,) if self.firmware else ()
        return (*self.libraries, *self.utilities, *fw, *self.icd_files)


def module_version(host: HostRoot) -> str:
    """The loaded kernel module's version; DriverRootError naming the files read."""
    text = host.read_text(PROC_VERSION, required=False) or ""
    if m := _MODULE_RE.search(text):
        return m.group(1)
    text = (host.read_text(SYS_VERSION, required=False) or "").strip()
    if _VERSION_RE.match(text):
        return text
    raise DriverRootError(
        f"no NVIDIA kernel module version in {PROC_VERSION} or {SYS_VERSION} "
        f"(host root {host.root}): is the driver loaded?"
    )


def find(host: HostRoot, driver: HostRoot, where: str) -> NvidiaUserSpace:
    """The user space of the loaded module's version under the driver root ``driver``
    (``where``: the driver root as the admin named it, for messages)."""
    version = module_version(host)
    if not driver.is_dir("/"):
        raise DriverRootError(f"driver root {where} ({driver.root}) is not a directory")
    suffix = f".so.{version}"
    lib_dir, names = "", []
    for d in LIBRARY_DIRS:
        names = [
            n for n in driver.listdir(d) if n.endswith(suffix) and n.startswith(LIBRARY_PREFIXES)
        ]
        if f"libcuda{suffix}" in names:
            lib_dir = d
            break
    missing = [r for r in REQUIRED if f"{r}.{version}" not in names]
    if not lib_dir or missing:
        raise DriverRootError(
            f"driver root {where}: no {' or '.join(f'{r}.{version}' for r in missing or REQUIRED)}"
            f" (driver {version}) in {', '.join(LIBRARY_DIRS)}"
        )
    libraries = tuple(f"{lib_dir}/{n}" for n in sorted(names))
    links = _links(driver, lib_dir, sorted(names), version)
    absent: list[str] = []
    utilities = []
    for tool in UTILITIES:
        found = next((f"{d}/{tool}" for d in BIN_DIRS if driver.exists(f"{d}/{tool}")), None)
        if found:
            utilities.append(found)
        else:
            absent.append(tool)
    firmware = f"/lib/firmware/nvidia/{version}"
    if not driver.is_dir(firmware):
        absent.append(firmware)
    icds = tuple(p for p in ICD_FILES if driver.exists(p))
    sockets = tuple(p for p in SOCKETS if driver.exists(p))
    return NvidiaUserSpace(
        version,
        lib_dir,
        libraries,
        links,
        tuple(utilities),
        firmware if firmware not in absent else None,
        icds,
        sockets,
        tuple(absent),
    )


def _links(
    driver: HostRoot, lib_dir: str, names: list[str], version: str
) -> tuple[tuple[str, str], ...]:
    """The host's links in ``lib_dir`` to the versioned libraries (``libX.so.1``,
    ``libX.so``), and the well-known ones the host lacks."""
    out: dict[str, str] = {}
    suffix = f".so.{version}"
    for name in names:
        stem = name[: -len(suffix)] + ".so"
        for link in LINK_NAMES.get(stem, ()):
            out[link] = name
    versioned = set(names)
    for entry in driver.listdir(lib_dir):
        if entry in versioned or not entry.startswith(LIBRARY_PREFIXES):
            continue
        target = driver.resolve(f"{lib_dir}/{entry}")
        base = target.rsplit("/", 1)[-1] if target else ""
        if base in versioned and target == f"{lib_dir}/{base}":
            out[entry] = base
    return tuple((f"{lib_dir}/{link}", target) for link, target in sorted(out.items()))
