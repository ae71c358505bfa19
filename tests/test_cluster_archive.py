"""A block's archive: all of its runs arrive in the result directory, or none."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from harness.cluster.archive import STAGING_PREFIX, pack_runs, remove_staging, unpack_block
from tbcore.errors import SpecError


def _runs(root: Path, *run_ids: str) -> Path:
    for run_id in run_ids:
        run_dir = root / "runs" / run_id
        run_dir.mkdir(parents=True)
        (run_dir / "row.json").write_text(f'{{"run_id": "{run_id}"}}\n')
        (run_dir / "client.pcap").write_bytes(bytes(range(256)) * 40)
    return root


def test_a_block_and_its_reruns_arrive_whole(tmp_path: Path) -> None:
    worker = _runs(tmp_path / "worker", "0002-a-r1", "0003-b-r1", "0003-b-r1-a2")
    client = tmp_path / "client"
    (client / "runs").mkdir(parents=True)
    data = pack_runs(worker, ["0002-a-r1", "0003-b-r1", "0003-b-r1-a2"])
    assert len(data) < 3 * 256 * 40  # compressed
    got = unpack_block(data, client, 1, {"0002-a-r1", "0003-b-r1"})
    assert got == ["0002-a-r1", "0003-b-r1", "0003-b-r1-a2"]
    for run_id in got:
        assert (client / "runs" / run_id / "client.pcap").read_bytes() == bytes(range(256)) * 40
    assert not list(client.glob(f"{STAGING_PREFIX}*"))


def test_a_run_of_another_block_refuses_the_whole_archive(tmp_path: Path) -> None:
    worker = _runs(tmp_path / "worker", "0002-a-r1", "0004-a-r2")
    client = tmp_path / "client"
    (client / "runs").mkdir(parents=True)
    data = pack_runs(worker, ["0002-a-r1", "0004-a-r2"])
    with pytest.raises(SpecError, match=r"0004-a-r2.*not of block 1"):
        unpack_block(data, client, 1, {"0002-a-r1", "0003-b-r1"})
    assert list((client / "runs").iterdir()) == []


def test_a_member_outside_runs_is_refused(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    (tmp_path / "runs").mkdir()
    with pytest.raises(SpecError, match="not under runs/"):
        unpack_block(buffer.getvalue(), tmp_path, 0, {"0000-a-r0"})
    assert not (tmp_path / "manifest.json").exists()


def test_a_partial_block_left_by_a_killed_client_is_replaced(tmp_path: Path) -> None:
    worker = _runs(tmp_path / "worker", "0002-a-r1")
    client = tmp_path / "client"
    (client / "runs" / "0002-a-r1").mkdir(parents=True)
    (client / "runs" / "0002-a-r1" / "stale").write_text("x")
    (client / f"{STAGING_PREFIX}1" / "runs").mkdir(parents=True)
    remove_staging(client)
    assert not list(client.glob(f"{STAGING_PREFIX}*"))
    unpack_block(pack_runs(worker, ["0002-a-r1"]), client, 1, {"0002-a-r1"})
    assert sorted(p.name for p in (client / "runs" / "0002-a-r1").iterdir()) == [
        "client.pcap",
        "row.json",
    ]
