"""Launcher pieces that need no cluster: PKI, build key, kubelet configuration."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed, build
from kubeacc.testbed.certs import CertificateAuthority
from kubeacc.testbed.kubelet import Kubelet, KubeletOptions
from kubeacc.testbed.shapes import MULTINODE_SHAPES, PROFILE_LABEL, SHAPE_LABEL
from kubeacc.testbed.versions import FEATURE_GATES, KUBERNETES_VERSION, feature_gate_flag


def test_issued_certificate_chains_to_the_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    pair = ca.issue(
        "srv", "kube-apiserver", dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True
    )
    ca_cert = x509.load_pem_x509_certificate(ca.cert_path.read_bytes())
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    assert cert.issuer == ca_cert.subject
    pub = ca_cert.public_key()
    assert isinstance(pub, ec.EllipticCurvePublicKey)
    assert cert.signature_hash_algorithm is not None
    pub.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert oct(pair.key.stat().st_mode & 0o777) == "0o600"


def test_build_key_follows_the_sources(tmp_path: Path) -> None:
    src = tmp_path / "testbed"
    shutil.copytree(build.source_dir(), src)
    key = build.build_key(src)
    assert key.startswith(f"{KUBERNETES_VERSION}-")
    assert build.build_key(src) == key
    main = src / "cmd" / "fake-cri" / "main.go"
    main.write_text(main.read_text() + "\n// changed\n")
    assert build.build_key(src) != key


def test_feature_gate_flag() -> None:
    flag = feature_gate_flag()
    assert "DRAConsumableCapacity=true" in flag
    assert flag.count("=") == len(FEATURE_GATES)
    assert "DynamicResourceAllocation" not in flag  # GA and locked in the pinned release


def test_kubelet_configuration(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "pki")
    kubelet = Kubelet(
        tmp_path,
        tmp_path / "bin",
        "https://127.0.0.1:1",
        ca,
        KubeletOptions(topology_manager_policy="single-numa-node", cpu_manager_policy="static"),
    )
    kubelet._prepare()
    cfg = kubelet.kubelet_config()
    assert cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["failCgroupV1"] is False
    assert cfg["address"] == "127.0.0.1"
    assert cfg["topologyManagerPolicy"] == "single-numa-node"
    assert cfg["reservedSystemCPUs"] == "0"
    assert cfg["containerRuntimeEndpoint"] == f"unix://{tmp_path}/cri/cri.sock"
    assert kubelet.device_plugin_dir == tmp_path / "kubelet" / "device-plugins"
    assert kubelet.plugins_registry_dir == tmp_path / "kubelet" / "plugins_registry"


def test_node_lists_are_checked_before_anything_starts(tmp_path: Path) -> None:
    a = KubeletOptions(node_name="a")
    with pytest.raises(ValueError, match="either kubelet or nodes"):
        Testbed.start(tmp_path / "x", kubelet=a, nodes=[a], bin_dir=tmp_path)
    with pytest.raises(ValueError, match="node names must be distinct: a, a"):
        Testbed.start(tmp_path / "x", nodes=[a, KubeletOptions(node_name="a")], bin_dir=tmp_path)
    assert not (tmp_path / "x").exists()


def test_node_shapes_label_their_nodes() -> None:
    options = [s.kubelet_options() for s in MULTINODE_SHAPES]
    assert [o.node_name for o in options] == [
        "gpu-server",
        "fpga-node",
        "kunlun-node",
        "edge-node",
    ]
    for shape, o in zip(MULTINODE_SHAPES, options, strict=True):
        assert o.labels == {SHAPE_LABEL: shape.shape, PROFILE_LABEL: shape.profile}
        assert shape.profile in profiles.PROFILES
