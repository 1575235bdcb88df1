"""Glance for the Cyborg lane: the image service Cyborg's agent downloads FPGA bitstreams from.

``glance`` (:data:`kubeacc.testbed.cyborgcloud.GLANCE_VERSION`) is installed into the Cyborg
lane's venv with Cyborg and Placement (their pins agree). :func:`glance_config` writes one
configuration directory: sqlite, the file store under the work directory (with the staging and
tasks stores Glance reserves for itself), no Keystone: the paste pipeline is Glance's own
``default`` flavor, whose ``unauthenticated-context`` filter gives every request an admin
context, and the legacy policy defaults (``enforce_new_defaults = False``) let that context act.
The API is the WSGI application ``glance.common.wsgi_app`` served by
:mod:`kubeacc.testbed.openstack_wsgi` (``glance-api`` needs eventlet's server).
"""

from __future__ import annotations

import shutil
from pathlib import Path


def ini_text(sections: dict[str, dict[str, str]]) -> str:
    """An oslo.config / paste INI file's text."""
    out = []
    for name, values in sections.items():
        out.append(f"[{name}]")
        out += [f"{k} = {v}" for k, v in values.items()]
        out.append("")
    return "\n".join(out)


def glance_config(workdir: Path, venv: Path, port: int) -> Path:
    """The configuration directory of a Glance on ``port`` keeping its data under ``workdir``
    (made here); ``OS_GLANCE_CONFIG_DIR`` for the WSGI application."""
    conf_dir = workdir / "glance"
    for sub in ("images", "staging", "tasks"):
        (conf_dir / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy(venv / "etc/glance/glance-api-paste.ini", conf_dir / "glance-api-paste.ini")
    (conf_dir / "glance-api.conf").write_text(
        ini_text(
            {
                "DEFAULT": {
                    "enabled_backends": "fs:file",
                    "worker_self_reference_url": f"http://127.0.0.1:{port}",
                    "debug": "false",
                },
                "database": {"connection": f"sqlite:///{conf_dir / 'glance.db'}"},
                "glance_store": {"default_backend": "fs"},
                "fs": {"filesystem_store_datadir": str(conf_dir / "images")},
                "os_glance_staging_store": {"filesystem_store_datadir": str(conf_dir / "staging")},
                "os_glance_tasks_store": {"filesystem_store_datadir": str(conf_dir / "tasks")},
                "oslo_policy": {"enforce_new_defaults": "false", "enforce_scope": "false"},
            }
        )
    )
    return conf_dir


def images_on_disk(conf_dir: Path) -> list[Path]:
    """The image files the file store holds (what was uploaded, whatever the API says)."""
    return sorted(p for p in (conf_dir / "images").iterdir() if p.is_file())
