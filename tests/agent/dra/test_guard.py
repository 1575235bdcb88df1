"""ClaimGuard: calls for the same claim UID take turns, calls for other claims do not wait."""

from __future__ import annotations

import threading

from kubeacc.agent.dra.guard import ClaimGuard


def test_same_uid_waits_other_uids_do_not() -> None:
    guard = ClaimGuard()
    release = threading.Event()
    entered = {name: threading.Event() for name in ("a", "b", "c")}

    def work(name: str, uids: set[str]) -> None:
        with guard.hold(uids):
            entered[name].set()
            if name == "a":
                release.wait()

    threads = {
        "a": threading.Thread(target=work, args=("a", {"u1", "u2"})),
        "b": threading.Thread(target=work, args=("b", {"u2", "u3"})),
        "c": threading.Thread(target=work, args=("c", {"u4"})),
    }
    threads["a"].start()
    assert entered["a"].wait(30)
    threads["b"].start()
    threads["c"].start()
    assert entered["c"].wait(30)  # another claim: not held up by a
    assert not entered["b"].wait(0.3)  # shares u2 with a: waits
    release.set()
    assert entered["b"].wait(30)
    for t in threads.values():
        t.join(30)
