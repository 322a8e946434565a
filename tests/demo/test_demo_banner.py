"""The demo's banner follows its options: counts in words, and "Try" steps that come true."""

from pathlib import Path

from jupyter_gpuburst.demo import DemoOptions, banner, federation_config, gpu_products


def text(**options) -> str:
    return banner(DemoOptions(**options), "http://127.0.0.1:1", Path("/k"), ["donor-1"])


def test_default_demo_lands_on_the_origin_then_the_donor() -> None:
    out = text()
    assert "origin: 2 GPUs" in out and "donor-1 (8 GPUs)" in out
    assert "student1, pick '2 GPUs' and start: the server lands on the origin." in out
    assert "student2, pick '2 GPUs' and start: the server lands on donor-1, a donor." in out
    assert "donor donor-1" not in out
    assert "pick 'CPU server + GPU kernels on demand': the server stays on the origin" in out


def test_steps_follow_the_options() -> None:
    out = text(origin_gpus=0, donor_gpus=1)
    assert "donor-1 (1 GPU)" in out and "1 GPUs" not in out
    assert "student1, pick '1 GPU' and start: the server lands on donor-1" in out
    assert "student2 with '1 GPU': no site has 1 free" in out
    out = text(origin_gpus=1, donor_gpus=2)
    assert "student1, pick '1 GPU' and start: the server lands on the origin." in out


def test_simulated_gpus_are_told_the_labels_of_their_nodes() -> None:
    products = gpu_products(federation_config(DemoOptions(donors=2)))
    assert products["origin"]["nvidia.com/gpu"] == "NVIDIA-A100-SXM4-40GB"
    assert products["origin"]["nvidia.com/mig-1g.10gb"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert products["donor-2"]["nvidia.com/gpu"] == "NVIDIA-H100-80GB-HBM3"


def test_banner_says_when_pods_have_networks_of_their_own() -> None:
    assert "network namespace" not in text()
    assert "pods:   each in a network namespace of its own, as on a cluster; the hub listens on 127.0.0.2" in text(pod_network="namespaces")


def test_the_doctor_step_names_gpuburst_as_another_shell_finds_it(monkeypatch, tmp_path) -> None:
    """`make demo` runs from the checkout's .venv, which a new shell has not activated."""
    import sys

    from jupyter_gpuburst import demo

    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "gpuburst").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(demo.shutil, "which", lambda name: None)
    assert demo.gpuburst_command() == ".venv/bin/gpuburst"
    assert "In another shell: .venv/bin/gpuburst doctor --kubeconfig /k" in text()
    monkeypatch.setattr(demo.shutil, "which", lambda name: str(bin_dir / name))
    assert demo.gpuburst_command() == "gpuburst"
