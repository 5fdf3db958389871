"""stack/huge_pages against a fake /proc: reserve grows the pool by what is missing,
leaves it when enough is available, gives back what the kernel could not fill; release
gives back what reserve added, as far as it is available."""

from __future__ import annotations

from pathlib import Path

import pytest

from paystream.stack import huge_pages


def _proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, total: int, free: int,
          reserved: int = 0) -> Path:
    meminfo, nr = tmp_path / "meminfo", tmp_path / "nr_hugepages"
    meminfo.write_text(f"MemTotal:       24000000 kB\nHugePages_Total:   {total:5d}\n"
                       f"HugePages_Free:    {free:5d}\nHugePages_Rsvd:    {reserved:5d}\n"
                       f"Hugepagesize:       2048 kB\n")
    nr.write_text(str(total))
    monkeypatch.setattr(huge_pages, "MEMINFO", meminfo)
    monkeypatch.setattr(huge_pages, "NR_HUGEPAGES", nr)
    return nr


def test_enough_free_leaves_the_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nr = _proc(tmp_path, monkeypatch, total=600, free=560)
    assert huge_pages.reserve(540, tmp_path / "added") == "540 pages, free already"
    assert nr.read_text() == "600"


def test_pages_another_cluster_reserved_are_not_free(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # A running cluster took 29 of its 540 pages so far: 540 show free, 511 of them its.
    _proc(tmp_path, monkeypatch, total=540, free=540, reserved=511)
    kernel = _Kernel(tmp_path / "meminfo", total=540, free=29)
    monkeypatch.setattr(huge_pages, "NR_HUGEPAGES", kernel)
    assert huge_pages.reserve(540, tmp_path / "added") == "540 pages reserved (pool 540 -> 1051)"
    assert kernel.written == "1051"


class _Kernel:
    """nr_hugepages as the kernel takes it: the new pages show up free in meminfo."""

    def __init__(self, meminfo: Path, total: int, free: int) -> None:
        self.meminfo, self.total, self.free, self.written = meminfo, total, free, ""

    def write_text(self, text: str) -> None:
        self.written = text
        added = int(text) - self.total
        self.meminfo.write_text(f"HugePages_Total: {int(text)}\n"
                                f"HugePages_Free: {self.free + added}\n")


def test_the_pool_grows_by_what_is_missing(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _proc(tmp_path, monkeypatch, total=600, free=100)
    kernel = _Kernel(tmp_path / "meminfo", total=600, free=100)
    monkeypatch.setattr(huge_pages, "NR_HUGEPAGES", kernel)
    assert huge_pages.reserve(540, tmp_path / "added") == "540 pages reserved (pool 600 -> 1040)"
    assert kernel.written == "1040"


def test_what_the_kernel_cannot_fill_is_given_back(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    nr = _proc(tmp_path, monkeypatch, total=0, free=0)  # meminfo stays at 0 free
    assert huge_pages.reserve(540, tmp_path / "added").startswith("only 0 of 540 pages")
    assert nr.read_text() == "0"


def test_release_gives_back_what_reserve_added(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _proc(tmp_path, monkeypatch, total=100, free=100)
    kernel = _Kernel(tmp_path / "meminfo", total=100, free=100)
    monkeypatch.setattr(huge_pages, "NR_HUGEPAGES", kernel)
    huge_pages.reserve(540, tmp_path / "added")
    assert (tmp_path / "added").read_text() == "440"
    # Its Postgres stopped: all 540 available again; only the 440 it added go back.
    kernel.total = 540
    kernel.free = 540
    assert huge_pages.release(tmp_path / "added") == 440
    assert kernel.written == "100"
    assert not (tmp_path / "added").exists()
    assert huge_pages.release(tmp_path / "added") == 0


def test_release_keeps_what_is_still_in_use(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # This stack added 540; another cluster holds all but 200 of the pool.
    _proc(tmp_path, monkeypatch, total=1080, free=740, reserved=540)
    (tmp_path / "added").write_text("540")
    kernel = _Kernel(tmp_path / "meminfo", total=1080, free=200)
    monkeypatch.setattr(huge_pages, "NR_HUGEPAGES", kernel)
    assert huge_pages.release(tmp_path / "added") == 200
    assert kernel.written == "880"
    assert (tmp_path / "added").read_text() == "340"
