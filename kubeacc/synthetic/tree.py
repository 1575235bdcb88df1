"""``HostBuilder``: one object to write a synthetic host (``/sys``, ``/dev``, ``/proc``).

Profiles use it, and so do tests that need a custom or damaged host::

    b = HostBuilder(tmp_path)
    b.numa(["0-3"], [[10]])
    root = b.root_complex(0, 0x3a, numa=0)
    port = b.bridge(root, "0000:3a:02.0", 0x8086, 0x352A)
    gpu = b.function(port, "0000:3b:00.0", 0x10DE, 0x2330, 0x030200, driver="nvidia")
    (gpu / "numa_node").write_text("garbage\\n")     # damage it any way you like

Paths given to the builder are host-absolute (``/dev/nvidia0``); :meth:`path` maps one to its
place on disk. Functions take PCI addresses as ``"dddd:bb:dd.f"`` strings (or :class:`Bdf`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from kubeacc.synthetic import (
    amd,
    classes,
    fpga,
    ids,
    netaddrs,
    nvidia,
    nvml,
    pciids,
    sensors,
    system,
)
from kubeacc.synthetic.fsw import TreeWriter
from kubeacc.synthetic.pci import (
    AUTO_GROUP,
    CLASS_PCI_BRIDGE,
    GEN4_X16,
    Bdf,
    Parent,
    PciFunction,
    PciTree,
    RootHandle,
)


class HostBuilder:
    """Writes one synthetic host below ``root``.

    ``seed`` drives every generated identifier (MACs, GUIDs, UUIDs): same seed, same tree.
    ``iommu`` gives each new function its own IOMMU group unless told otherwise.
    """

    def __init__(self, root: Path, *, seed: str = "kubeacc", iommu: bool = True) -> None:
        self.w = TreeWriter(root)
        self.root = self.w.root
        self.seed = seed
        self._iommu = iommu
        self._layout: system.NumaLayout | None = None
        self._pci: PciTree | None = None
        self._fpga = fpga.FpgaWriter(self.w)
        self._ifindex = 2
        #: Interface addresses written so far (kubeacc.synthetic.netaddrs).
        self._addrs: list[netaddrs.Address] = []
        #: The next ``/sys/class/hwmon/hwmon<N>`` (kubeacc.synthetic.sensors).
        self._hwmon = 0
        self._uverbs = 0
        self._nvidia_version: str | None = None
        classes.write_loopback(self.w)

    # -- host basics --------------------------------------------------------------------------

    def path(self, host_path: str) -> Path:
        """Where a host-absolute path (``/sys/...``) lives on disk."""
        return self.w.host(host_path)

    def numa(self, nodes: list[str], distances: list[list[int]]) -> system.NumaLayout:
        """Declare NUMA nodes by CPU list (``"0-55,112-167"``) and the distance matrix.

        Call before adding PCI functions (their ``local_cpulist`` comes from it); a builder
        used without it gets one node with CPUs 0-7.
        """
        if self._pci is not None:
            raise RuntimeError("numa() must be called before any PCI function is added")
        self._layout = system.NumaLayout(list(nodes), [list(r) for r in distances])
        system.write_numa(self.w, self._layout)
        return self._layout

    @property
    def layout(self) -> system.NumaLayout:
        if self._layout is None:
            self.numa(["0-7"], [[10]])
        assert self._layout is not None
        return self._layout

    @property
    def pci(self) -> PciTree:
        if self._pci is None:
            self._pci = PciTree(self.w, self.layout, iommu=self._iommu)
        return self._pci

    def identity(
        self,
        hostname: str,
        cpu_model: str = "Intel(R) Xeon(R) Platinum 8480C",
        kernel: str = "6.5.0-45-generic",
        cpu_vendor: str = "GenuineIntel",
    ) -> None:
        """``/etc/hostname``, a minimal ``/proc/cpuinfo`` and the kernel release."""
        system.write_identity(self.w, hostname, kernel)
        system.write_cpuinfo(self.w, self.layout, cpu_model, cpu_vendor)

    def dev_node(self, path: str) -> Path:
        """A ``/dev`` entry (an empty regular file; parents are made)."""
        return self.w.dev_node(path)

    # -- PCI ----------------------------------------------------------------------------------

    def root_complex(self, domain: int, bus: int, numa: int = -1) -> RootHandle:
        """``/sys/devices/pciDDDD:BB``; functions below inherit ``numa`` unless given one."""
        return self.pci.root_complex(domain, bus, numa)

    def bridge(
        self,
        parent: Parent,
        bdf: str | Bdf,
        vendor: int,
        device: int,
        *,
        driver: str | None = "pcieport",
        numa: int | None = None,
        link: tuple[str, int] | None = GEN4_X16,
        class_code: int = CLASS_PCI_BRIDGE,
    ) -> PciFunction:
        """A PCI-to-PCI bridge: root port under a root, switch up/down ports under ports.

        The returned handle is the ``parent`` for what sits behind it; its secondary bus is
        the bus of the first function added below it.
        """
        return self.pci.add(
            parent, bdf, vendor, device, class_code, driver=driver, numa=numa, link=link
        )

    def function(
        self,
        parent: Parent,
        bdf: str | Bdf,
        vendor: int,
        device: int,
        class_code: int,
        driver: str | None = None,
        numa: int | None = None,
        subsystem: tuple[int, int] | None = None,
        revision: int = 0,
        iommu_group: int | None = AUTO_GROUP,
        link: tuple[str, int] | None = GEN4_X16,
    ) -> Path:
        """An endpoint function; returns its real sysfs directory on disk.

        ``numa=None`` inherits the root complex's node. ``iommu_group``: ``AUTO_GROUP`` (a new
        group), an int (join/create that group) or ``None`` (no IOMMU link at all).
        """
        fn = self.pci.add(
            parent,
            bdf,
            vendor,
            device,
            class_code,
            driver=driver,
            numa=numa,
            subsystem=subsystem,
            revision=revision,
            iommu_group=iommu_group,
            link=link,
        )
        return self.w.host(fn.sysfs)

    def get(self, bdf: str | Bdf) -> PciFunction:
        """The record of a function already added (sysfs path, numa, driver, ...)."""
        return self.pci.get(bdf)

    def bind(self, bdf: str | Bdf, driver: str) -> None:
        self.pci.bind(bdf, driver)

    def unbind(self, bdf: str | Bdf) -> None:
        self.pci.unbind(bdf)

    def sriov(
        self,
        pf_bdf: str | Bdf,
        total: int,
        num: int,
        vf_device_id: int,
        vf_driver: str | None,
        *,
        offset: int = 1,
        stride: int = 1,
    ) -> list[str]:
        """SR-IOV on a PF: ``sriov_*`` files, ``num`` VFs, ``virtfnN``/``physfn`` links.

        Returns the VF addresses in VF order.
        """
        vfs = self.pci.sriov(
            pf_bdf, total, num, vf_device_id, vf_driver, offset=offset, stride=stride
        )
        return [str(v.bdf) for v in vfs]

    # -- class devices ------------------------------------------------------------------------

    def netdev(
        self,
        bdf: str | Bdf,
        ifname: str,
        *,
        address: str | None = None,
        mtu: int = 1500,
        speed: int = 100000,
        operstate: str = "up",
        infiniband: bool = False,
        ips: Sequence[str] = (),
    ) -> Path:
        """``<pcidev>/net/<ifname>`` and ``/sys/class/net/<ifname>``.

        ``infiniband=True`` makes an IPoIB interface (type 32, 20-byte address). ``ips``: the
        interface's addresses in CIDR notation, in the host's ``/proc/1/net`` files
        (:mod:`kubeacc.synthetic.netaddrs`).
        """
        fn = self.get(bdf)
        if address is None:
            if infiniband:
                guid = ids.guid(self.seed, f"port/{fn.bdf}").replace(":", "")
                tail = ":".join(guid[i : i + 2] for i in range(0, 16, 2))
                address = f"00:00:10:49:fe:80:00:00:00:00:00:00:{tail}"
            else:
                address = ids.mac(self.seed, f"mac/{fn.bdf}/{ifname}")
        spec = classes.NetdevSpec(
            address=address,
            mtu=mtu,
            speed=speed,
            operstate=operstate,
            link_type=classes.ARPHRD_INFINIBAND if infiniband else classes.ARPHRD_ETHER,
        )
        d = classes.write_netdev(self.w, fn, ifname, spec, self._ifindex)
        sensors.write_netdev_statistics(self.w, d)
        if ips:
            self._addrs += [netaddrs.Address(ifname, self._ifindex, ip) for ip in ips]
            netaddrs.write_addresses(self.w, self._addrs)
        self._ifindex += 1
        return self.w.host(d)

    def rdma(
        self,
        bdf: str | Bdf,
        ibdev: str,
        *,
        link_layer: str = "InfiniBand",
        rate: str = "400 Gb/sec (4X NDR)",
        hca_type: str = "MT4129",
        state: str = "4: ACTIVE",
        node_guid: str | None = None,
    ) -> Path:
        """``<pcidev>/infiniband/<ibdev>``, the class link, and ``/dev/infiniband/uverbsN``."""
        fn = self.get(bdf)
        spec = classes.RdmaSpec(
            node_guid=node_guid or ids.guid(self.seed, f"node/{fn.bdf}"),
            link_layer=link_layer,
            rate=rate,
            hca_type=hca_type,
            state=state,
            phys_state="5: LinkUp" if state.startswith("4") else "3: Disabled",
            lid=self._uverbs + 1 if link_layer == "InfiniBand" else 0,
        )
        d = classes.write_rdma(self.w, fn, ibdev, spec, self._uverbs)
        self._uverbs += 1
        return self.w.host(d)

    def drm(self, bdf: str | Bdf, card_index: int, render_index: int | None = None) -> None:
        """``drm/card<card_index>`` and, if given, ``drm/renderD<128 + render_index>``."""
        render = None if render_index is None else 128 + render_index
        classes.write_drm(self.w, self.get(bdf), card_index, render)

    def nvme(self, bdf: str | Bdf, index: int, model: str = "SAMSUNG MZQL23T8HCLS") -> None:
        classes.write_nvme(
            self.w, self.get(bdf), index, model, ids.serial(self.seed, f"nvme/{bdf}", 14)
        )

    # -- NVIDIA -------------------------------------------------------------------------------

    def nvidia_version(self, ver: str) -> None:
        """``/proc/driver/nvidia/version`` and the control device nodes."""
        self._nvidia_version = ver
        nvidia.write_version(self.w, ver)

    def proc_nvidia(
        self,
        bdf: str | Bdf,
        model: str,
        uuid: str,
        minor: int,
        *,
        video_bios: str = "96.00.99.00.01",
        excluded: bool = False,
    ) -> None:
        """``/proc/driver/nvidia/gpus/<bdf>/information`` and ``/dev/nvidia<minor>``."""
        fn = self.get(bdf)
        nvidia.write_gpu(
            self.w,
            nvidia.NvidiaGpuProc(
                bdf=fn.bdf,
                model=model,
                uuid=uuid,
                minor=minor,
                irq=0,
                video_bios=video_bios,
                firmware=self._nvidia_version,
                excluded=excluded,
            ),
        )

    def mig_caps(self, minor: int, gpu_instances: Sequence[int]) -> None:
        nvidia.write_mig_caps(self.w, minor, gpu_instances)

    def nvml(self, gpus: list[nvml.NvmlGpu], driver_version: str | None = None) -> None:
        """Write ``/.synthetic/nvml.json`` (the NVML stand-in's data)."""
        ver = driver_version or self._nvidia_version or "550.90.07"
        nvml.write_nvml(self.w, ver, gpus)
        from kubeacc.synthetic import tools  # the driver's host tools come with it

        tools.install(self.root)

    # -- FPGA ---------------------------------------------------------------------------------

    def dfl_fpga(
        self,
        bdf: str | Bdf,
        *,
        afu_id: str = fpga.ZERO_ID,
        compat_id: str,
        bitstream_id: int = 0x23000410010309,
        bitstream_metadata: int = 0x1111117,
    ) -> fpga.DflCard:
        """An in-tree DFL card below a ``dfl-pci`` function (see :mod:`fpga`)."""
        fn = self.get(bdf)
        card = self._fpga.dfl(
            fn,
            afu_id=afu_id,
            compat_id=compat_id,
            bitstream_id=bitstream_id,
            bitstream_metadata=bitstream_metadata,
        )
        region = fn.sysfs / "fpga_region" / f"region{card.region}"
        self._sensors(region / f"dfl-fme.{card.fme}", "dfl_fme_thermal", power_file="power1_input")
        self.w.attr(region / f"dfl-port.{card.fme}" / "errors" / "errors", "0x0")
        return card

    def opae_fpga(
        self,
        bdf: str | Bdf,
        *,
        afu_id: str = fpga.ZERO_ID,
        interface_id: str,
        bitstream_id: int = 0x23000410010309,
        bitstream_metadata: int = 0x1111117,
    ) -> fpga.OpaeCard:
        """An OPAE (``intel-fpga-pci``) card below a function (see :mod:`fpga`)."""
        return self._fpga.opae(
            self.get(bdf),
            afu_id=afu_id,
            interface_id=interface_id,
            bitstream_id=bitstream_id,
            bitstream_metadata=bitstream_metadata,
        )

    # -- AMD ----------------------------------------------------------------------------------

    def amdgpu(self, bdf: str | Bdf, vram_bytes: int) -> None:
        fn = self.get(bdf)
        amd.write_amdgpu_attrs(self.w, fn, vram_bytes, ids.hex_id(self.seed, f"amd/{fn.bdf}", 16))
        self._sensors(fn.sysfs, "amdgpu", power_cap_uw=300_000_000)

    def _sensors(
        self,
        device: PurePosixPath,
        name: str,
        *,
        power_file: str = "power1_average",
        power_cap_uw: int | None = None,
    ) -> None:
        sensors.write_hwmon(
            self.w,
            device,
            self._hwmon,
            name,
            power_uw=45_000_000,
            power_cap_uw=power_cap_uw,
            power_file=power_file,
        )
        self._hwmon += 1

    def kfd(self, gpus: list[amd.KfdGpu]) -> None:
        cores = [len(c) for c in self.layout.cpus_by_node]
        amd.write_kfd(self.w, cores, gpus)

    # -- pci.ids ------------------------------------------------------------------------------

    def pci_ids(self, text: str | None = None) -> Path:
        """``/usr/share/misc/pci.ids``: ``text`` as given, or the catalog entries in use."""
        if text is None:
            used = {(f.vendor, f.device) for f in self.pci.functions.values()}
            text = pciids.render(used)
        return self.w.write("/usr/share/misc/pci.ids", text)

    def mark(self, profile: str) -> None:
        """Record which profile wrote the tree (``/.synthetic/profile``)."""
        self.w.attr("/.synthetic/profile", profile)
