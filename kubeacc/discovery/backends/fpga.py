"""FPGAs: Intel cards under the in-tree DFL driver or the OPAE driver, Xilinx and AWS cards.

DFL:  <pci>/fpga_region/regionN/dfl-fme.K (+ its PR region's compat_id), .../dfl-port.K/afu_id
OPAE: <pci>/fpga/intel-fpga-dev.N/intel-fpga-fme.N/pr/interface_id, .../intel-fpga-port.N/afu_id
Xilinx Alveo and AWS F1-style cards expose a management and a user (application) function; the
card is reported once, as its user function, with the management function as an attribute.
"""

from __future__ import annotations

from kubeacc.discovery.context import DiscoveryContext
from kubeacc.discovery.pci import PCIFunction
from kubeacc.model import Device, DeviceType, FPGADriver, FPGAState, Health, HealthState

INTEL = "0x8086"
#: Intel programmable acceleration cards (PAC Arria 10, N3000, D5005, N6000/N6001).
INTEL_FPGA_IDS = {"0x09c4", "0x0b30", "0x0b2b", "0xbcce", "0xbcc0", "0xbcc1"}
XILINX = "0x10ee"
AMAZON = "0x1d0f"
#: AWS FPGA functions: application PF and management PF (other 0x1d0f ids are ENA and NVMe).
AWS_USER_IDS = {"0xf000", "0xf010"}
AWS_MGMT_IDS = {"0xf001", "0xf011", "0x1041", "0x1042"}
#: Alveo management functions have even device ids, their user functions the next odd id.
XILINX_MGMT_DRIVERS = ("xclmgmt",)
_ZERO_ID = "0" * 32


def _clean_id(text: str | None) -> str | None:
    """Normalise a 128-bit id (with or without dashes/0x); all zeros means nothing loaded."""
    if not text:
        return None
    body = text.strip().lower().removeprefix("0x").replace("-", "")
    return None if body.strip("0") == "" else body


class FpgaBackend:
    name = "fpga"

    def discover(self, ctx: DiscoveryContext) -> list[Device]:
        found: list[Device] = []
        for fn in list(ctx.unclaimed()):
            if fn.physfn is not None:
                continue
            dev: Device | None = None
            if ctx.host.is_dir(f"{fn.sysfs}/fpga_region"):
                dev = self._dfl(ctx, fn)
            elif ctx.host.is_dir(f"{fn.sysfs}/fpga"):
                dev = self._opae(ctx, fn)
            elif fn.vendor == INTEL and fn.device in INTEL_FPGA_IDS:
                dev = self._unbound_intel(ctx, fn)
            elif fn.vendor == XILINX and fn.base_class in (0x05, 0x11, 0x12):
                dev = self._card(ctx, fn, FPGADriver.XILINX)
            elif fn.vendor == AMAZON and fn.device in AWS_USER_IDS | AWS_MGMT_IDS:
                dev = self._card(ctx, fn, FPGADriver.AWS)
            if dev is not None:
                found.append(dev)
        return found

    def _dfl(self, ctx: DiscoveryContext, fn: PCIFunction) -> Device:
        name = ctx.claim(fn, DeviceType.FPGA)
        dev = ctx.pci_device(fn, DeviceType.FPGA, name, source="fpga-dfl")
        host = ctx.host
        state = FPGAState(driver=FPGADriver.DFL)
        nodes = []
        for region in host.listdir(f"{fn.sysfs}/fpga_region", name):
            rdir = f"{fn.sysfs}/fpga_region/{region}"
            for entry in host.listdir(rdir, name):
                if entry.startswith("dfl-fme."):
                    state.region = region
                    nodes.append(f"/dev/{entry}")
                    state.interface_id = self._dfl_compat_id(ctx, f"{rdir}/{entry}", name)
                    bits = host.read_text(f"{rdir}/{entry}/bitstream_id", name, required=False)
                    if bits:
                        dev.attributes["bitstreamId"] = bits
                elif entry.startswith("dfl-port."):
                    state.ports.append(entry)
                    nodes.append(f"/dev/{entry}")
                    if state.afu_id is None:
                        state.afu_id = _clean_id(host.read_text(f"{rdir}/{entry}/afu_id", name))
        dev.fpga = state
        dev.device_nodes = ctx.dev_nodes(*nodes, device=name)
        if state.region is None:
            dev.health = Health(
                state=HealthState.UNHEALTHY, reason="no FPGA management engine (dfl-fme)"
            )
        elif not state.ports:
            dev.health = Health(state=HealthState.UNHEALTHY, reason="no accelerator port")
        return dev

    def _dfl_compat_id(self, ctx: DiscoveryContext, fme: str, name: str) -> str | None:
        for sub in ctx.host.listdir(fme, name):
            if not sub.startswith("dfl-fme-region."):
                continue
            for region in ctx.host.listdir(f"{fme}/{sub}/fpga_region", name):
                compat = ctx.host.read_text(f"{fme}/{sub}/fpga_region/{region}/compat_id", name)
                if compat:
                    return _clean_id(compat)
        return None

    def _opae(self, ctx: DiscoveryContext, fn: PCIFunction) -> Device:
        name = ctx.claim(fn, DeviceType.FPGA)
        dev = ctx.pci_device(fn, DeviceType.FPGA, name, source="fpga-opae")
        host = ctx.host
        state = FPGAState(driver=FPGADriver.OPAE)
        nodes = []
        for fpga in host.listdir(f"{fn.sysfs}/fpga", name):
            fdir = f"{fn.sysfs}/fpga/{fpga}"
            state.region = fpga
            for entry in host.listdir(fdir, name):
                if entry.startswith("intel-fpga-fme."):
                    nodes.append(f"/dev/{entry}")
                    state.interface_id = _clean_id(
                        host.read_text(f"{fdir}/{entry}/pr/interface_id", name)
                    )
                    bits = host.read_text(f"{fdir}/{entry}/bitstream_id", name, required=False)
                    if bits:
                        dev.attributes["bitstreamId"] = bits
                elif entry.startswith("intel-fpga-port."):
                    state.ports.append(entry)
                    nodes.append(f"/dev/{entry}")
                    if state.afu_id is None:
                        state.afu_id = _clean_id(host.read_text(f"{fdir}/{entry}/afu_id", name))
        dev.fpga = state
        dev.device_nodes = ctx.dev_nodes(*nodes, device=name)
        if not state.ports:
            dev.health = Health(state=HealthState.UNHEALTHY, reason="no accelerator port")
        return dev

    def _unbound_intel(self, ctx: DiscoveryContext, fn: PCIFunction) -> Device:
        name = ctx.claim(fn, DeviceType.FPGA)
        dev = ctx.pci_device(fn, DeviceType.FPGA, name, source="fpga-pci")
        dev.fpga = FPGAState(driver=FPGADriver.DFL)
        reason = f"bound to {fn.driver}, not an FPGA driver" if fn.driver else "no FPGA driver"
        if fn.driver in ("vfio-pci",):
            dev.attributes["boundTo"] = fn.driver
        else:
            dev.health = Health(state=HealthState.UNHEALTHY, reason=reason)
        return dev

    def _is_mgmt(self, fn: PCIFunction, kind: FPGADriver) -> bool:
        if kind is FPGADriver.AWS:
            return fn.device in AWS_MGMT_IDS
        if fn.driver in XILINX_MGMT_DRIVERS:
            return True
        return fn.driver is None and fn.device_int % 2 == 0

    def _card(self, ctx: DiscoveryContext, fn: PCIFunction, kind: FPGADriver) -> Device | None:
        """A two-function card: the user function is the device, management an attribute."""
        if self._is_mgmt(fn, kind):
            siblings = [
                f
                for f in ctx.functions
                if f.bdf[:-1] == fn.bdf[:-1] and f.bdf != fn.bdf and f.vendor == fn.vendor
            ]
            if siblings:
                return None  # reported through its user function
        name = ctx.claim(fn, DeviceType.FPGA)
        source = "fpga-xilinx" if kind is FPGADriver.XILINX else "fpga-aws"
        dev = ctx.pci_device(fn, DeviceType.FPGA, name, source=source)
        dev.fpga = FPGAState(driver=kind)
        for other in ctx.functions:
            if other.bdf[:-1] == fn.bdf[:-1] and other.bdf != fn.bdf and other.vendor == fn.vendor:
                ctx.claimed.add(other.bdf)
                dev.attributes["managementFunction"] = other.bdf
        nodes = [
            f"/dev/dri/{e}"
            for e in ctx.host.listdir(f"{fn.sysfs}/drm", name)
            if e.startswith("renderD")
        ]
        dev.device_nodes = ctx.dev_nodes(*nodes, device=name)
        if fn.driver is None:
            dev.health = Health(state=HealthState.UNHEALTHY, reason="no kernel driver bound")
        return dev
