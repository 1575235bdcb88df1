"""Install (or reuse) OpenStack Cyborg and Placement and run them, with RabbitMQ, for the tests.

Nothing of Cyborg or Placement is stood in for: :func:`ensure_built` makes a virtual environment
of its own under ``$KUBEACC_CACHE/cyborg-<version>-<hash>/venv`` (the two projects pin oslo,
eventlet and SQLAlchemy versions of their own, so never the project's venv) and installs
:data:`PACKAGES` from PyPI into it; RabbitMQ is Debian's ``rabbitmq-server``
(``scripts/bootstrap.sh`` installs it). The hash covers the package list and the Python.

:class:`CyborgCloud` runs one small cloud in a work directory: RabbitMQ (its own node name, ports
and Erlang port mapper, so that it shares nothing with a RabbitMQ of the machine), Placement
(``auth_strategy = noauth2``, sqlite), ``cyborg-api`` (the WSGI application behind a paste
pipeline without keystone's ``authtoken`` filter: callers send the identity headers a token
would have given), ``cyborg-conductor`` and one ``cyborg-agent`` per compute host with the
``fake_driver`` (one FPGA device, one deployable of :data:`FAKE_SLOTS` accelerators). Cyborg's
``pci_driver`` reads the machine through ``lspci`` under privsep, so it cannot be pointed at a
synthetic host's tree. What Nova does at deployment, making each compute node's resource
provider in Placement, is done here before the agents start. Cyborg's ``[nova]`` endpoint is
``nova_url``: where kube-acc serves ``os-server-external-events`` as the consumer.

With ``glance``, Glance runs too (:mod:`kubeacc.testbed.glanceservice`; sqlite, the file store,
no Keystone) and Cyborg's ``[glance]`` section points at it. The agents of ``fpga_hosts`` run
Cyborg's ``intel_fpga_driver`` instead of the fake one, each on a synthetic PAC card in a mount
namespace of its own (:mod:`kubeacc.testbed.cyborgfpga`), so that Cyborg's program API
(``PATCH /v2/deployables/{uuid}/program``) downloads from Glance and programs that card.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kubeacc.testbed.build import BuildError, _lock, cache_root
from kubeacc.testbed.cyborgfpga import FpgaHost, make_fpga_host
from kubeacc.testbed.glanceservice import glance_config, ini_text
from kubeacc.testbed.procs import Process, free_port, wait_for

CYBORG_VERSION = "17.0.0"
PLACEMENT_VERSION = "16.0.0"
GLANCE_VERSION = "33.0.0"
PACKAGES = (
    f"openstack-cyborg=={CYBORG_VERSION}",
    f"openstack-placement=={PLACEMENT_VERSION}",
    f"glance=={GLANCE_VERSION}",
)
#: Debian's RabbitMQ, run directly (the wrapper in /usr/sbin switches to the rabbitmq user).
RABBITMQ_DIR = Path("/usr/lib/rabbitmq/bin")
#: How many accelerators the fake driver's one deployable has (cyborg's FakeDriver).
FAKE_SLOTS = 16
#: The token Placement's noauth2 strategy reads as the admin user.
PLACEMENT_TOKEN = "admin"
_MARK = "installed"

_PASTE = """[pipeline:main]
pipeline = request_id api_v2

[app:api_v2]
paste.app_factory = cyborg.api.app:app_factory

[filter:request_id]
paste.filter_factory = oslo_middleware:RequestId.factory
"""


def cyborg_dir() -> Path:
    """Where this package set's venv lives (installed or not)."""
    h = hashlib.sha256("\0".join((*PACKAGES, sys.version)).encode()).hexdigest()[:16]
    return cache_root() / f"cyborg-{CYBORG_VERSION}-{h}"


def ensure_built() -> Path:
    """The directory whose ``venv/`` holds Cyborg and Placement, installed first if needed (one
    installer at a time; a venv left half-made by a killed install is made again)."""
    target = cyborg_dir()
    if (target / _MARK).is_file():
        return target
    with _lock(target.parent / f".{target.name}.lock"):
        if (target / _MARK).is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        start = time.monotonic()
        venv = target / "venv"
        log = target / "install.log"
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin/python"), "-m", "pip", "install", "-q", *PACKAGES],
        ]
        for argv in steps:
            with log.open("a") as out:
                done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
            if done.returncode != 0:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
                raise BuildError(f"installing {' '.join(PACKAGES)} failed:\n{tail}")
        (target / "install-seconds").write_text(f"{time.monotonic() - start:.1f}\n")
        (target / _MARK).write_text("")
    return target


def rabbitmq_missing() -> str:
    """Why RabbitMQ cannot run here, or ""."""
    if not (RABBITMQ_DIR / "rabbitmq-server").is_file():
        return "rabbitmq-server is not installed (Debian's package; scripts/bootstrap.sh)"
    return ""


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _get_ok(url: str, headers: dict[str, str]) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2):
            return True
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except OSError:
        return False


def _call(url: str, method: str, body: Any, headers: dict[str, str]) -> Any:
    data = None if body is None else json.dumps(body).encode()
    all_headers = {**headers, "Content-Type": "application/json", "Accept": "application/json"}
    req = urllib.request.Request(url, data, all_headers, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read()
    return json.loads(text) if text else None


@dataclass
class CyborgCloud:
    """RabbitMQ, Placement and Cyborg for ``hosts`` (see the module doc)."""

    workdir: Path
    logs: Path
    #: the compute hosts (kube-acc's node names): one resource provider and one agent each
    hosts: tuple[str, ...]
    #: where Cyborg's conductor sends ``os-server-external-events`` (kube-acc's endpoint)
    nova_url: str
    venv: Path | None = None
    #: run Glance, Cyborg's image service (the program API needs it)
    glance: bool = False
    #: hosts (of ``hosts``) whose agent runs Cyborg's Intel FPGA driver on a synthetic PAC
    fpga_hosts: tuple[str, ...] = ()
    procs: dict[str, Process] = field(default_factory=dict)
    fpga: dict[str, FpgaHost] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def placement_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['placement']}"

    @property
    def cyborg_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['cyborg']}"

    @property
    def glance_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['glance']}"

    def start(self, timeout: float = 120) -> CyborgCloud:
        """Start everything and wait until every agent's device is in Cyborg; on failure stop
        what was started."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _bin(self, name: str) -> str:
        assert self.venv is not None
        return str(self.venv / "bin" / name)

    def _start(self, timeout: float) -> None:
        missing = rabbitmq_missing()
        if missing:
            raise BuildError(missing)
        self.venv = self.venv or ensure_built() / "venv"
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name in ("amqp", "dist", "epmd", "placement", "cyborg", "glance"):
            self.ports[name] = free_port()
        self._start_rabbitmq(timeout)
        self._start_placement(timeout)
        if self.glance:
            self._start_glance(timeout)
        conf = self._cyborg_conf()
        self._run([self._bin("cyborg-dbsync"), "--config-file", str(conf), "create_schema"])
        for host in self.hosts:
            self.placement("POST", "/resource_providers", {"name": host})
        self._serve("cyborg-api", "cyborg", conf)
        self.procs["cyborg-conductor"] = Process(
            "cyborg-conductor",
            [self._bin("cyborg-conductor"), "--config-file", str(conf)],
            self.logs / "cyborg-conductor.log",
        ).start()
        for host in self.hosts:
            own = self._cyborg_conf(host)
            argv = [self._bin("cyborg-agent"), "--config-file", str(own)]
            if host in self.fpga_hosts:
                self.fpga[host] = make_fpga_host(host, self.workdir / "fpga" / host)
                argv = self.fpga[host].wrap(argv)
            self.procs[f"cyborg-agent-{host}"] = Process(
                f"cyborg-agent-{host}", argv, self.logs / f"cyborg-agent-{host}.log"
            ).start()
        watch = list(self.procs.values())
        wait_for("cyborg-api", partial(_get_ok, f"{self.cyborg_url}/", {}), timeout, watch=watch)
        wait_for("Cyborg's devices of every host", self._all_reported, timeout, watch=watch)

    def _serve(self, name: str, app: str, config: Path) -> Process:
        """One of the WSGI applications (``placement``, ``cyborg``) on its port."""
        wsgi = str(Path(__file__).with_name("openstack_wsgi.py"))
        argv = [self._bin("python"), "-P", wsgi, app, str(self.ports[app]), str(config)]
        proc = Process(name, argv, self.logs / f"{name}.log").start()
        self.procs[name] = proc
        return proc

    def _run(self, argv: list[str]) -> None:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {(done.stdout + done.stderr)[-3000:]}")

    def _start_rabbitmq(self, timeout: float) -> None:
        base = self.workdir / "rabbitmq"
        base.mkdir(parents=True, exist_ok=True)
        (base / "enabled_plugins").write_text("[].\n")
        env = {
            **os.environ,
            "HOME": str(base),
            "RABBITMQ_NODENAME": f"kubeacc{self.ports['amqp']}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.ports["amqp"]),
            "RABBITMQ_DIST_PORT": str(self.ports["dist"]),
            "ERL_EPMD_PORT": str(self.ports["epmd"]),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
            "RABBITMQ_PID_FILE": str(base / "pid"),
        }
        self._rabbit_env = env
        proc = Process(
            "rabbitmq", [str(RABBITMQ_DIR / "rabbitmq-server")], self.logs / "rabbitmq.log", env=env
        ).start()
        self.procs["rabbitmq"] = proc
        wait_for("RabbitMQ", partial(_port_open, self.ports["amqp"]), timeout, watch=[proc])

    def _start_placement(self, timeout: float) -> None:
        conf_dir = self.workdir / "placement"
        conf_dir.mkdir(parents=True, exist_ok=True)
        conf = conf_dir / "placement.conf"
        conf.write_text(
            ini_text(
                {
                    "DEFAULT": {"debug": "false"},
                    "api": {"auth_strategy": "noauth2"},
                    "placement_database": {"connection": f"sqlite:///{conf_dir / 'placement.db'}"},
                }
            )
        )
        self._run([self._bin("placement-manage"), "--config-file", str(conf), "db", "sync"])
        proc = self._serve("placement", "placement", conf_dir)
        wait_for("Placement", partial(_get_ok, f"{self.placement_url}/", {}), timeout, watch=[proc])

    def _start_glance(self, timeout: float) -> None:
        assert self.venv is not None
        conf_dir = glance_config(self.workdir, self.venv, self.ports["glance"])
        conf = str(conf_dir / "glance-api.conf")
        self._run([self._bin("glance-manage"), "--config-file", conf, "db_sync"])
        proc = self._serve("glance", "glance", conf_dir)
        wait_for(
            "Glance", partial(_get_ok, f"{self.glance_url}/v2/images", {}), timeout, watch=[proc]
        )

    def _cyborg_conf(self, host: str = "") -> Path:
        conf_dir = self.workdir / "cyborg"
        conf_dir.mkdir(parents=True, exist_ok=True)
        paste = conf_dir / "api-paste.ini"
        paste.write_text(_PASTE)
        token = {"auth_type": "admin_token", "token": PLACEMENT_TOKEN}
        driver = "intel_fpga_driver" if host in self.fpga_hosts else "fake_driver"
        default = {
            "transport_url": f"rabbit://guest:guest@127.0.0.1:{self.ports['amqp']}/",
            "periodic_interval": "2",
            # an RPC to a conductor that is down fails in seconds, not Oslo's minute
            "rpc_response_timeout": "10",
            "debug": "false",
        }
        sections = {
            "DEFAULT": {**default, "host": host} if host else default,
            "api": {"api_paste_config": str(paste)},
            "database": {"connection": f"sqlite:///{conf_dir / 'cyborg.db'}"},
            "placement": {**token, "endpoint": self.placement_url},
            "nova": {**token, "endpoint": self.nova_url},
            "oslo_concurrency": {"lock_path": str(conf_dir / "locks")},
            "agent": {"enabled_drivers": driver, "resource_provider_name": host}
            if host
            else {"enabled_drivers": driver},
            "glance": {"endpoint_override": self.glance_url, "num_retries": "0"},
            # root already: the privsep daemon is the venv's helper, without sudo
            "cyborg_sys_admin": {"helper_command": self._bin("privsep-helper")},
        }
        path = conf_dir / (f"cyborg-{host}.conf" if host else "cyborg.conf")
        path.write_text(ini_text(sections))
        return path

    def placement(self, method: str, path: str, body: Any = None) -> Any:
        """One call of Placement's API as the admin (noauth2's admin token)."""
        headers = {"X-Auth-Token": PLACEMENT_TOKEN, "OpenStack-API-Version": "placement 1.39"}
        return _call(self.placement_url + path, method, body, headers)

    def cyborg(self, method: str, path: str, body: Any = None) -> Any:
        """One call of Cyborg's v2 API as the admin (what a token would have said)."""
        headers = {
            "X-Roles": "admin,member,reader",
            "X-Project-Id": "admin",
            "X-User-Id": "admin",
            "X-Service-Roles": "service",
            "OpenStack-API-Version": "accelerator 2.0",
        }
        return _call(self.cyborg_url + path, method, body, headers)

    def _all_reported(self) -> bool:
        """Every host's device is in Cyborg and its deployable's inventory in Placement."""
        try:
            devices = self.cyborg("GET", "/v2/devices")["devices"]
            if not {d["hostname"] for d in devices} >= set(self.hosts):
                return False
            for host in self.hosts:
                (root,) = self.placement("GET", f"/resource_providers?name={host}")[
                    "resource_providers"
                ]
                tree = self.placement("GET", f"/resource_providers?in_tree={root['uuid']}")
                children = [rp for rp in tree["resource_providers"] if rp["uuid"] != root["uuid"]]
                path = "/resource_providers/{}/inventories"
                if not any(
                    self.placement("GET", path.format(rp["uuid"]))["inventories"] for rp in children
                ):
                    return False
        except (OSError, ValueError):
            return False
        return True

    def check(self) -> None:
        for p in self.procs.values():
            p.check()

    def stop(self) -> None:
        """Stop everything, RabbitMQ's Erlang port mapper included."""
        for name in reversed(list(self.procs)):
            self.procs[name].stop(10.0)
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        if "epmd" in self.ports and Path(epmd).exists():
            env = {**os.environ, "ERL_EPMD_PORT": str(self.ports["epmd"])}
            subprocess.run([epmd, "-kill"], env=env, capture_output=True, check=False, timeout=10)
