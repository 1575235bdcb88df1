"""How every ``kubeacc`` command ends on a mistake: one line on stderr and an exit code.

Exit codes: 2 for usage (an unknown flag, a bad flag value, a path that does not exist), 1 for a
failure while running (no usable kubeconfig, API server unreachable, TLS, unauthorized,
forbidden, a socket path too long to bind). A traceback is left only for what is a bug in kube-acc.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import typer

USAGE = 2
FAILURE = 1


class CommandExit(SystemExit):
    """End the command with exit ``code`` (its message, if any, is already on stderr).

    kube-acc's own, not ``typer.Exit``: the daemons run without typer (kubeacc/cli/argv.py). A
    :class:`SystemExit` needs no mapping on either path: typer lets it through (its test runner
    reads the code from it), and so does everything that catches ``Exception``.
    """

    def __init__(self, code: int) -> None:
        super().__init__(code)


def fail(message: str, code: int = USAGE) -> NoReturn:
    """Print ``error: message`` on stderr and leave with ``code``."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise CommandExit(code)


def describe(exc: BaseException) -> str | None:
    """A one-line account of a runtime failure the user can act on; None for anything else."""
    import httpx2
    from lightkube.core.exceptions import ApiError

    from kubeacc.clientconfig import KubeconfigError
    from kubeacc.host.files import HostReadError
    from kubeacc.node.sockets import SocketPathTooLong

    if isinstance(exc, KubeconfigError | SocketPathTooLong | HostReadError):
        return str(exc)
    if isinstance(exc, ApiError):
        return _api_error(exc)
    if isinstance(exc, httpx2.TransportError):
        server = _server(exc)
        text = " ".join(str(exc).split()) or type(exc).__name__
        if "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text:
            return (
                f"TLS handshake with {server} failed ({text}): the kubeconfig's "
                "certificate-authority does not match the server"
            )
        if isinstance(exc, httpx2.TimeoutException):
            return f"API server {server} did not answer in time ({text})"
        return (
            f"cannot reach the API server {server} ({text}): is the cluster up and the "
            "kubeconfig's server address right?"
        )
    return None


def _server(exc: Any) -> str:
    try:
        url = exc.request.url
    except RuntimeError:  # httpx raises when the error carries no request
        return "(unknown server)"
    return f"{url.scheme}://{url.netloc.decode()}"


def _api_error(exc: Any) -> str:
    status = exc.status
    code = int(getattr(status, "code", 0) or 0)
    message = " ".join(str(getattr(status, "message", "") or exc).split())
    if code == 401:
        return f"unauthorized: the API server rejected the kubeconfig's credentials ({message})"
    if code == 403:
        return f"forbidden: {message}"
    return f"the API server answered {code} {getattr(status, 'reason', '') or ''}: {message}"


def fail_with(exc: Exception) -> NoReturn:
    """End a command that raised ``exc``: one line and exit 1 for a failure :func:`describe`
    knows, the traceback (re-raised) for anything else."""
    line = describe(exc)
    if line is None:
        raise exc
    print(f"error: {line}", file=sys.stderr)
    sys.exit(FAILURE)


def exit_with(code: object) -> NoReturn:
    """End a command that returned ``code`` (an int is its exit status, anything else 0)."""
    sys.exit(code if isinstance(code, int) else 0)


def run_app(
    app: typer.Typer, args: Sequence[str] | None = None, prog_name: str | None = None
) -> NoReturn:
    """Run a typer application with one-line usage errors and one-line runtime failures."""
    import typer

    try:
        code = app(args=args, prog_name=prog_name, standalone_mode=False)
    except typer.TyperException as exc:  # typer's click exceptions: usage errors and the like
        ctx = getattr(exc, "ctx", None)
        code = int(getattr(exc, "exit_code", USAGE))
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None and code == USAGE else ""
        text = " ".join(exc.format_message().replace("Value error, ", "").split())
        print(f"error: {text}{hint}", file=sys.stderr)
        sys.exit(code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        fail_with(exc)
    exit_with(code)
