"""Vendor and device names from the system's pci.ids database.

The database is about 1.5 MB; parsing it whole would cost more than discovering a large node.
Lookups jump straight to the vendor's section instead and cache what they find.
"""

from __future__ import annotations

import os
import re

from kubeacc.host.files import HostRoot, read_regular

#: Where distributions install the database (Debian's ``pci.ids`` package uses the first).
#: pci.ids is about 1.5 MB; a database past this size is not one.
DB_LIMIT = 16 << 20
DB_PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids", "/usr/share/pci.ids")

#: Short vendor names for the vendors kube-acc knows; pci.ids has long legal names.
SHORT_VENDORS = {
    "0x10de": "NVIDIA",
    "0x1002": "AMD",
    "0x1022": "AMD",
    "0x8086": "Intel",
    "0x15b3": "Mellanox",
    "0x10ee": "Xilinx",
    "0x1d0f": "Amazon",
    "0x1d22": "Baidu",
    "0x14e4": "Broadcom",
    "0x1077": "QLogic",
    "0x19e5": "Huawei",
    "0x1ded": "Alibaba",
    "0x1e3e": "Habana",
}

_BRACKET_RE = re.compile(r"\[([^\]]+)\]\s*$")


def marketing_name(pci_ids_name: str) -> str:
    """``GH100 [H100 SXM5 80GB]`` -> ``H100 SXM5 80GB``: the bracket holds the product name."""
    match = _BRACKET_RE.search(pci_ids_name)
    return match.group(1).strip() if match else pci_ids_name


class PciIds:
    """Name lookups in one pci.ids file, or hex fallbacks when there is none."""

    def __init__(self, text: str | None, source: str | None = None):
        self._text = text
        self.source = source
        self._vendors: dict[str, tuple[str | None, int, int]] = {}

    @classmethod
    def load(cls, host: HostRoot) -> PciIds:
        """The host's database if it has one, else the one of the machine running discovery."""
        for path in DB_PATHS:
            text = host.read_text(path, required=False, limit=DB_LIMIT)
            if text:
                return cls(text, host.real(path))
        if host.root != "/":
            for path in DB_PATHS:
                if os.path.exists(path):
                    try:
                        data = read_regular(path, DB_LIMIT)
                    except OSError as err:
                        host.sink.oserror(path, "cannot read", err)
                        continue
                    return cls(data.decode("utf-8", errors="replace"), path)
        return cls(None)

    def _vendor_section(self, vendor_id: str) -> tuple[str | None, int, int]:
        """(vendor name, start, end) of the vendor's block in the text."""
        if vendor_id in self._vendors:
            return self._vendors[vendor_id]
        found: tuple[str | None, int, int] = (None, 0, 0)
        text = self._text
        if text is not None:
            key = "\n" + vendor_id.removeprefix("0x").lower() + "  "
            pos = text.find(key)
            if pos >= 0:
                line_end = text.find("\n", pos + 1)
                line_end = len(text) if line_end < 0 else line_end
                name = text[pos + len(key) : line_end].strip()
                end = line_end
                while True:
                    nxt = text.find("\n", end + 1)
                    line = text[end + 1 : nxt if nxt >= 0 else len(text)]
                    if nxt < 0 or not (line.startswith("\t") or line.startswith("#") or not line):
                        break
                    end = nxt
                found = (name, line_end, end)
        self._vendors[vendor_id] = found
        return found

    def vendor_name(self, vendor_id: str) -> str:
        """Short name for known vendors, the database's name otherwise, else the hex id."""
        if vendor_id in SHORT_VENDORS:
            return SHORT_VENDORS[vendor_id]
        name, _, _ = self._vendor_section(vendor_id)
        return marketing_name(name) if name else vendor_id

    def device_name(self, vendor_id: str, device_id: str) -> str | None:
        name, start, end = self._vendor_section(vendor_id)
        if name is None or self._text is None:
            return None
        key = "\n\t" + device_id.removeprefix("0x").lower() + "  "
        pos = self._text.find(key, start - 1, end + 1)
        if pos < 0:
            return None
        line_end = self._text.find("\n", pos + 1)
        return self._text[pos + len(key) : line_end if line_end >= 0 else None].strip()

    def model_name(self, vendor_id: str, device_id: str) -> str:
        """The product name of a device, or its hex id when the database doesn't know it."""
        name = self.device_name(vendor_id, device_id)
        return marketing_name(name) if name else device_id
