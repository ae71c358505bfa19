"""A cluster host's fingerprint and the reasons it gets no work."""

from __future__ import annotations

from harness import __version__
from harness.cluster.hosts import check_host, cpu_model, problems_of


def test_cpu_model_is_the_first_processors_model_name() -> None:
    text = "processor\t: 0\nvendor_id\t: X\nmodel name\t: Lab CPU @ 2.0GHz\n\nmodel name\t: other\n"
    assert cpu_model(text) == "Lab CPU @ 2.0GHz"
    assert cpu_model("processor : 0\n") == "unknown"


def test_each_reason_is_one_line() -> None:
    assert problems_of(uid=0, has_tun=True, version="1", expected_version="1", missing=[]) == []
    lines = problems_of(
        uid=1000, has_tun=False, version="0.2", expected_version="0.1", missing=["veth: no"]
    )
    assert len(lines) == 4
    assert "uid 1000" in lines[0] and "root" in lines[0]
    assert "/dev/net/tun" in lines[1]
    assert "0.2 there, 0.1 on the client" in lines[2]
    assert lines[3] == "veth: no"
    assert all("\n" not in line for line in lines)


def test_a_host_with_another_version_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("TESTBED_HOST", "lab-7")
    print_ = check_host("9.9.9")
    assert print_["host"] == "lab-7"
    assert print_["testbed_version"] == __version__
    assert print_["cores"] >= 1 and print_["kernel"]
    assert any("9.9.9 on the client" in p for p in print_["problems"])
