"""``--log-level`` for every long-running command, and the logging set-up behind it.

At ``info`` a component's log says what it did (operation validated/dispatched/finished, claim
prepared, slices published, plugin registered); the HTTP client's one line per request
(httpx2/httpx) appears only at ``debug``. httpcore's connection tracing stays off at every level.
"""

from __future__ import annotations

import logging
import sys
from enum import StrEnum
from typing import Annotated

from kubeacc.cli.declare import option


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


LogLevelOption = Annotated[
    LogLevel,
    option(
        "--log-level",
        case_sensitive=False,
        help="debug shows every API request; info what the component did.",
    ),
]

#: Loggers that write one line per HTTP request (or finer) at INFO/DEBUG.
HTTP_LOGGERS = ("httpx", "httpx2")
TRACE_LOGGERS = ("httpcore", "httpcore2", "hpack", "grpclib")


def setup_logging(level: LogLevel) -> None:
    """Configure the root logger on stderr at ``level``; HTTP request lines only at debug."""
    numeric = logging.getLevelName(level.value.upper())
    logging.basicConfig(
        level=numeric,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    http = logging.DEBUG if level is LogLevel.DEBUG else logging.WARNING
    for name in HTTP_LOGGERS:
        logging.getLogger(name).setLevel(http)
    for name in TRACE_LOGGERS:
        logging.getLogger(name).setLevel(max(numeric, logging.INFO))
