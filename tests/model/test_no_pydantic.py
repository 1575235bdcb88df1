"""The device model and what the device plugin builds from it do not import pydantic.

pydantic stays for the CRD types (their schemas are the CRDs) and the admin discovery file;
the node path — discovery, the model and its JSON, the device plugin's config and manager —
must not pull it in again (docs/dependencies.md). typer, which parses the daemons' options,
imports pydantic itself when it converts an option value; that is not checked here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kubeacc.synthetic import profiles

_NODE_PATH = """
import sys
from pathlib import Path
from kubeacc.deviceplugin.config import parse_config
from kubeacc.deviceplugin.manager import DevicePluginManager
from kubeacc.discovery import discover
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.model import Inventory
from kubeacc.model.schema import inventory_schema
{extra}
inv = discover(SyntheticHost(Path(sys.argv[1])))
assert inv.devices, "no devices discovered"
assert Inventory.from_json_dict(inv.to_json_dict()) == inv
parse_config({{"types": {{"gpu": {{"replicas": 2}}}}}})
inventory_schema()
print(sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pydantic_core")))
"""


def _pydantic_modules(host: str, extra: str = "") -> str:
    done = subprocess.run(
        [sys.executable, "-c", _NODE_PATH.format(extra=extra), host],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_discovery_model_and_device_plugin_config_need_no_pydantic(tmp_path: Path) -> None:
    host = profiles.build("l4-pair", tmp_path / "host")
    assert _pydantic_modules(str(host)) == "[]"


def test_the_check_sees_pydantic_when_something_imports_it(tmp_path: Path) -> None:
    host = profiles.build("l4-pair", tmp_path / "host")
    assert "'pydantic'" in _pydantic_modules(str(host), "import kubeacc.crds.types")
