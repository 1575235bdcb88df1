"""Opaque claim configuration kubeacc.io/v1alpha1: validation and the environment it adds."""

from __future__ import annotations

import pytest

from kubeacc.controller.policies import device_class
from kubeacc.crds.opaque import (
    ConfigError,
    FpgaConfig,
    GpuConfig,
    NicConfig,
    SharingConfig,
    applies_to,
    config_env,
    parse_config,
)

V = "kubeacc.io/v1alpha1"


def test_gpu_time_slicing_env() -> None:
    cfg = parse_config(
        {"apiVersion": V, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}
    )
    assert isinstance(cfg, GpuConfig)
    assert config_env(cfg) == {
        "KUBEACC_GPU_SHARING": "TimeSlicing",
        "KUBEACC_GPU_TIMESLICE": "Default",
    }


def test_fpga_bitstream_recorded() -> None:
    digest = "sha256:" + "ab" * 32
    cfg = parse_config(
        {"apiVersion": V, "kind": "FpgaConfig", "bitstream": {"name": "aes", "digest": digest}}
    )
    assert isinstance(cfg, FpgaConfig)
    assert config_env(cfg)["KUBEACC_FPGA_BITSTREAM"] == f"aes@{digest}"


def test_nic_settings() -> None:
    cfg = parse_config({"apiVersion": V, "kind": "NicConfig", "vlan": 100, "mtu": 9000})
    assert isinstance(cfg, NicConfig)
    assert config_env(cfg) == {"KUBEACC_NIC_VLAN": "100", "KUBEACC_NIC_MTU": "9000"}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"apiVersion": "v9", "kind": "GpuConfig"}, "unsupported apiVersion"),
        ({"apiVersion": V, "kind": "TpuConfig"}, "kind: Invalid value 'TpuConfig'"),
        ({"apiVersion": V, "kind": "GpuConfig", "sharng": {}}, "unknown field `sharng`"),
        ({"apiVersion": V, "kind": "NicConfig", "vlan": 5000}, "vlan: Expected `int` <= 4094"),
        (
            {"apiVersion": V, "kind": "FpgaConfig", "bitstream": {"name": "x", "digest": "1"}},
            "bitstream.digest",
        ),
        ({"apiVersion": V, "kind": "GpuConfig", "env": {"1BAD": "x"}}, "not an environment"),
        (
            {"apiVersion": V, "kind": "GpuConfig", "env": {"ACCELERATOR_UNITS": "x"}},
            "set by the driver",
        ),
        ("just a string", "must be a JSON object"),
    ],
)
def test_bad_configs_are_clear_errors(params: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_config(params)


@pytest.mark.parametrize(
    "params",
    [
        {"apiVersion": V, "kind": "GpuConfig\nINFO forged line"},
        {"apiVersion": V, "kind": "GpuConfig", "x\rINFO forged line": 1},
        {"apiVersion": V, "kind": "GpuConfig", "sharing": {"strategy": "MPS\u2028forged"}},
        {"apiVersion": "v1\nforged", "kind": "GpuConfig"},
    ],
)
def test_a_claims_strings_never_start_a_line_of_the_error(params: object) -> None:
    """Issue 43: the error goes to the agent's log and the pod's events; a namespace user
    writes the claim's config, so nothing of it may break the line."""
    with pytest.raises(ConfigError) as err:
        parse_config(params)
    message = str(err.value)
    assert message.isprintable(), message
    assert "forged" in message


@pytest.mark.parametrize(
    "sharing",
    [
        {},
        {"mode": "TimeSliced", "maxConsumers": 4},
        {"mode": "MemoryShared", "maxConsumers": 2, "memoryPerConsumerBytes": 8 << 30},
    ],
)
def test_every_policy_class_config_is_accepted(sharing: dict[str, object]) -> None:
    """What the controller writes into a policy's DeviceClass is what the agent accepts."""
    cls = device_class({"metadata": {"name": "p", "uid": "u"}, "spec": {"sharing": sharing}})
    (entry,) = cls["spec"]["config"]
    cfg = parse_config(entry["opaque"]["parameters"])
    assert isinstance(cfg, SharingConfig)
    assert applies_to(cfg, "gpu") and applies_to(cfg, "fpga")
    env = config_env(cfg)
    assert env["KUBEACC_SHARING_POLICY"] == "p"
    assert env["KUBEACC_SHARING_MODE"] == sharing.get("mode", "Exclusive")
    assert env["KUBEACC_SHARING_MAX_CONSUMERS"] == str(sharing.get("maxConsumers", 1))
    if "memoryPerConsumerBytes" in sharing:
        assert env["KUBEACC_DEVICE_MEMORY_LIMIT"] == "8192"


def test_device_kinds_apply_to_their_type_only() -> None:
    cfg = parse_config({"apiVersion": V, "kind": "NicConfig", "vlan": 1})
    assert applies_to(cfg, "nic") and not applies_to(cfg, "gpu")


def test_gpu_sharing_strategies_and_their_time_slice() -> None:
    base = {"apiVersion": "kubeacc.io/v1alpha1", "kind": "GpuConfig"}
    mps = parse_config({**base, "sharing": {"strategy": "MPS"}})
    assert config_env(mps)["KUBEACC_GPU_SHARING"] == "MPS"
    with pytest.raises(ConfigError, match="timeSlice Short needs strategy TimeSlicing"):
        parse_config({**base, "sharing": {"strategy": "MPS", "timeSlice": "Short"}})
    with pytest.raises(ConfigError, match=r"sharing\.strategy"):
        parse_config({**base, "sharing": {"strategy": "Spatial"}})


@pytest.mark.parametrize(
    ("sharing", "strategy", "time_slice", "shared_only"),
    [
        ({"mode": "TimeSliced", "timeSlice": "Short"}, "TimeSlicing", "Short", False),
        ({"mode": "TimeSliced"}, "TimeSlicing", "Default", False),
        ({"mode": "MPS"}, "MPS", "Default", True),
        ({"mode": "MemoryShared"}, None, None, True),
        ({"mode": "Exclusive"}, None, None, False),
    ],
)
def test_gpu_policy_classes_carry_the_strategy(
    sharing: dict[str, object], strategy: str | None, time_slice: str | None, shared_only: bool
) -> None:
    policy = {"metadata": {"name": "p", "uid": "u"}, "spec": {"selector": {"types": ["gpu"]}}}
    policy["spec"]["sharing"] = sharing  # type: ignore[index]
    cls = device_class(policy)
    configs = [parse_config(e["opaque"]["parameters"]) for e in cls["spec"]["config"]]
    assert isinstance(configs[0], SharingConfig)
    gpu = [c for c in configs if isinstance(c, GpuConfig)]
    if strategy is None:
        assert gpu == []
    else:
        assert gpu[0].sharing is not None
        assert (gpu[0].sharing.strategy, gpu[0].sharing.time_slice) == (strategy, time_slice)
    (selector,) = cls["spec"]["selectors"]
    assert selector["cel"]["expression"].endswith("&& device.allowMultipleAllocations") == (
        shared_only
    )


def test_a_time_sliced_policy_over_any_type_adds_no_gpu_config() -> None:
    cls = device_class(
        {"metadata": {"name": "p", "uid": "u"}, "spec": {"sharing": {"mode": "TimeSliced"}}}
    )
    assert [e["opaque"]["parameters"]["kind"] for e in cls["spec"]["config"]] == ["SharingConfig"]


@pytest.mark.parametrize("mode", ["Exclusive", "TimeSliced"])
def test_a_policy_class_other_than_mig_selects_whole_devices_only(mode: str) -> None:
    cls = device_class(
        {
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"selector": {"types": ["gpu"]}, "sharing": {"mode": mode}},
        }
    )
    (selector,) = cls["spec"]["selectors"]
    assert selector["cel"]["expression"].endswith(
        ' && !has(device.attributes["kubeacc.io"].migProfile)'
    )


def test_a_mig_policy_class_selects_only_partitions_of_its_profiles() -> None:
    cls = device_class(
        {
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "selector": {"types": ["gpu"]},
                "sharing": {"mode": "MIG", "migProfiles": ["3g.40gb", "1g.10gb", "3g.40gb"]},
            },
        }
    )
    (selector,) = cls["spec"]["selectors"]
    attr = 'device.attributes["kubeacc.io"].migProfile'
    assert selector["cel"]["expression"].endswith(
        f' && has({attr}) && {attr} in ["1g.10gb", "3g.40gb"]'
    )
    # no GpuConfig: the partition is made at prepare, nothing to apply on the GPU
    configs = [parse_config(e["opaque"]["parameters"]) for e in cls["spec"]["config"]]
    assert [type(c) for c in configs] == [SharingConfig]
    assert configs[0].mode == "MIG"
