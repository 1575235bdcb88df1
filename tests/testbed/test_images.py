"""The real-runtime testbed's images: OCI layout tarballs made here from busybox-static."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from kubeacc.testbed.images import (
    PAUSE_IMAGE,
    WORKLOAD_IMAGE,
    ImageError,
    build_images,
    busybox_layer,
)


def blobs(tarball: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    with tarfile.open(tarball) as tar:
        files = {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }
    return json.loads(files["index.json"]), files


def blob(files: dict[str, bytes], digest: str) -> bytes:
    data = files[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def test_images_are_complete_oci_layouts(tmp_path: Path) -> None:
    work, pause = build_images(tmp_path)
    assert (work.name, pause.name) == (WORKLOAD_IMAGE, PAUSE_IMAGE)
    for image, cmd0 in ((work, "sh"), (pause, "sleep")):
        index, files = blobs(image.tarball)
        assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
        (desc,) = index["manifests"]
        assert desc["digest"] == image.digest
        assert desc["annotations"]["io.containerd.image.name"] == image.name
        manifest = json.loads(blob(files, desc["digest"]))
        config = json.loads(blob(files, manifest["config"]["digest"]))
        assert config["config"]["Cmd"][0] == cmd0
        (layer_desc,) = manifest["layers"]
        layer = blob(files, layer_desc["digest"])
        assert config["rootfs"]["diff_ids"] == [layer_desc["digest"]]
        with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
            members = {m.name: m for m in tar.getmembers()}
        assert members["bin/busybox"].mode == 0o755
        assert members["bin/sh"].issym() and members["bin/sh"].linkname == "busybox"
        assert members["bin/sleep"].issym()


def test_images_are_reproducible(tmp_path: Path) -> None:
    first = build_images(tmp_path / "a")
    second = build_images(tmp_path / "b")
    for a, b in zip(first, second, strict=True):
        assert a.digest == b.digest
        assert a.tarball.read_bytes() == b.tarball.read_bytes()


def test_missing_busybox_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="busybox-static"):
        busybox_layer(tmp_path / "busybox")
    (tmp_path / "script").write_text("#!/bin/sh\n")
    with pytest.raises(ImageError, match="not an ELF"):
        busybox_layer(tmp_path / "script")
