"""``kubeacc extender``: help, and mistakes that end in one line, never a traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import yaml

from tests.cli.clirun import assert_one_line_error, kubeacc
from tests.cli.test_errors_cli import kubeconfig_doc


def test_help_names_the_verbs_and_the_scheduler_configuration(tmp_path: Path) -> None:
    result = kubeacc("extender", "--help", home=tmp_path)
    assert result.returncode == 0, result.stderr
    for needle in ("filter", "prioritize", "bind", "KubeSchedulerConfiguration", "--address"):
        assert needle in result.stdout, needle


def test_no_cluster_configuration_at_all(tmp_path: Path) -> None:
    assert_one_line_error(kubeacc("extender", "--insecure-http", home=tmp_path), 1, "kubeconfig")


def test_a_file_that_is_not_a_kubeconfig(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("just: a mapping\n")
    result = kubeacc("extender", "--insecure-http", "--kubeconfig", str(bad), home=tmp_path)
    assert_one_line_error(result, 1, str(bad))


def test_an_api_server_that_is_not_there(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kc = tmp_path / "kc.yaml"
    kc.write_text(yaml.safe_dump(kubeconfig_doc(f"https://127.0.0.1:{port}")))
    result = kubeacc(
        "extender", "--insecure-http", "--kubeconfig", str(kc), home=tmp_path, timeout=60
    )
    assert_one_line_error(result, 1, "cannot reach the API server", f"127.0.0.1:{port}")


def test_a_bad_address_is_a_usage_error(tmp_path: Path) -> None:
    kc = tmp_path / "kc.yaml"
    kc.write_text(yaml.safe_dump(kubeconfig_doc("https://127.0.0.1:1")))
    result = kubeacc("extender", "--kubeconfig", str(kc), "--address", "nowhere", home=tmp_path)
    assert_one_line_error(result, 2, "--address must be HOST:PORT")


def test_no_tls_files_and_no_opt_in_is_refused(tmp_path: Path) -> None:
    kc = tmp_path / "kc.yaml"
    kc.write_text(yaml.safe_dump(kubeconfig_doc("https://127.0.0.1:1")))
    result = kubeacc("extender", "--kubeconfig", str(kc), home=tmp_path)
    assert_one_line_error(result, 2, "--tls-cert-file", "--client-ca-file", "--insecure-http")
    half = kubeacc("extender", "--kubeconfig", str(kc), "--tls-cert-file", str(kc), home=tmp_path)
    assert_one_line_error(half, 2, "--client-ca-file")
    both = ("--insecure-http", "--tls-cert-file", str(kc))
    assert_one_line_error(kubeacc("extender", *both, home=tmp_path), 2, "exclude each other")


def test_unusable_tls_files_are_one_line(tmp_path: Path) -> None:
    kc = tmp_path / "kc.yaml"
    kc.write_text(yaml.safe_dump(kubeconfig_doc("https://127.0.0.1:1")))
    args = [f"--tls-{k}-file={kc}" for k in ("cert", "key")] + [f"--client-ca-file={kc}"]
    result = kubeacc("extender", "--kubeconfig", str(kc), *args, home=tmp_path)
    assert_one_line_error(result, 2, "certificate", str(kc))


def test_standalone_device_plugin_refuses_shared_gpus(tmp_path: Path) -> None:
    # sharing needs the extender's decisions from the API server: the node agent's job
    cfg = tmp_path / "dp.yaml"
    cfg.write_text("types:\n  gpu: {shared: true}\n")
    result = kubeacc("device-plugin", "--config", str(cfg), home=tmp_path)
    assert_one_line_error(result, 2, "shared gpu", "kubeacc agent --device-plugin-config")
