"""Serve Placement's, Cyborg's or Glance's WSGI application on one port (run by the OpenStack
venv's Python).

``python -P openstack_wsgi.py placement PORT CONFIG_DIR``, ``... cyborg PORT CONFIG_FILE`` or
``... glance PORT CONFIG_DIR``. A threaded server from the standard library: Cyborg's
``cyborg-api`` console script does not run under oslo.service's threading backend, and neither
project ships a server of its own (Glance's ``glance-api`` needs eventlet's). This file imports
nothing of kube-acc: it runs in the separate venv that :mod:`kubeacc.testbed.cyborgcloud`
builds, which pins its own libraries.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.command} {self.path} -> {args[1] if len(args) > 1 else ''}\n")


def _placement(config_dir: str) -> Callable[..., Any]:
    os.environ["OS_PLACEMENT_CONFIG_DIR"] = config_dir
    from placement.wsgi import api  # type: ignore[import-not-found]

    return api.application  # type: ignore[no-any-return]


def _cyborg(config_file: str) -> Callable[..., Any]:
    # cyborg.wsgi.api reads its configuration from sys.argv when imported
    sys.argv = [sys.argv[0], "--config-file", config_file]
    from cyborg.wsgi import api  # type: ignore[import-not-found]

    return api.application  # type: ignore[no-any-return]


def _glance(config_dir: str) -> Callable[..., Any]:
    os.environ["OS_GLANCE_CONFIG_DIR"] = config_dir
    from glance.common import wsgi_app  # type: ignore[import-not-found]

    return wsgi_app.init_app()  # type: ignore[no-any-return]


_APPS = {"placement": _placement, "cyborg": _cyborg, "glance": _glance}


def main() -> None:
    which, port, config = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    app = _APPS[which](config)
    server = make_server("127.0.0.1", port, app, server_class=_Server, handler_class=_Quiet)
    sys.stderr.write(f"{which} serving on 127.0.0.1:{port}\n")
    sys.stderr.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
