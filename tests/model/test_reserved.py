"""Who a claim is reserved for: pods, pod groups, other consumers; malformed entries left out."""

from __future__ import annotations

from kubeacc.model.reserved import POD, POD_GROUP, Reservation, reservations


def test_pods_pod_groups_and_other_consumers() -> None:
    claim = {
        "status": {
            "reservedFor": [
                {"resource": "pods", "name": "a", "uid": "1"},
                {"apiGroup": "", "resource": "pods", "name": "b", "uid": "2"},
                {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": "3"},
                {"apiGroup": "example.com", "resource": "vms", "name": "v", "uid": "4"},
                {"resource": "pods"},  # no name
                "garbage",
            ]
        }
    }
    got = reservations(claim)
    assert got == [
        Reservation(POD, "a", "1"),
        Reservation(POD, "b", "2"),
        Reservation(POD_GROUP, "g", "3"),
        Reservation("vms.example.com", "v", "4"),
    ]
    assert [r.ref("ns") for r in got] == [
        "ns/a",
        "ns/b",
        "ns/g (pod group)",
        "ns/v (vms.example.com)",
    ]
    assert reservations({}) == [] and reservations({"status": {"reservedFor": None}}) == []
