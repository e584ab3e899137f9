"""The Vagrantfile parses, defines the 3-node lab and keeps to loopback-range addresses;
the slow test walks the whole Vagrant path a user follows: `lab vagrant-prep`,
`vagrant up --provider libvirt`, a campaign with a verdict, `vagrant destroy`,
`lab vagrant-prep --teardown` (tests/harness/test_vm_lab.py boots the same image
with qemu directly)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _validate(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["vagrant", "validate", "--ignore-provider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


@pytest.mark.integration
def test_vagrantfile_validates():
    if not shutil.which("vagrant"):
        pytest.skip("vagrant is not installed (scripts/setup.sh --with-test-tools installs it)")
    out = _validate()
    assert out.returncode == 0, out.stderr or out.stdout
    assert "validated successfully" in out.stdout
    for n in range(1, 4):
        assert f"n{n}:" in out.stdout
    text = (ROOT / "Vagrantfile").read_text()
    assert "192.168." not in text.replace("192.168.121.0/24", "")  # only named as what we avoid
    # A private-range network is refused before any VM is made.
    bad = _validate(SPLITBRAIN_NET="192.168.56")
    assert bad.returncode != 0 and "loopback-range" in (bad.stderr + bad.stdout)


def _vagrant_libvirt_missing() -> str | None:
    """Why the libvirt path cannot run here, or None (``scripts/setup.sh --with-vagrant``)."""
    if os.geteuid() != 0:
        return "needs root (libvirtd, a libvirt network)"
    for tool in ("vagrant", "virsh"):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/setup.sh --with-vagrant installs it)"
    plugins = subprocess.run(
        ["vagrant", "plugin", "list"], capture_output=True, text=True, timeout=120
    ).stdout
    if "vagrant-libvirt" not in plugins:
        return "vagrant-libvirt is not installed (scripts/setup.sh --with-vagrant installs it)"
    return None


@pytest.mark.slow
@pytest.mark.integration
def test_vagrant_up_then_a_campaign_then_destroy(tmp_path):
    """`vagrant up` plus a campaign, as the README and the Vagrantfile's header say,
    with every step's cleanup run whatever fails (7.5 min under TCG)."""
    why = _vagrant_libvirt_missing()
    if why:
        pytest.skip(why)
    splitbrain = str(Path(sys.executable).with_name("splitbrain"))
    subnet = "127.91.7"

    def run(
        argv: list[str], timeout: float, env: dict[str, str]
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
        )

    # Machines' state apart from a user's own `.vagrant` in the checkout.
    env = {**os.environ, "VAGRANT_DOTFILE_PATH": str(tmp_path / "vagrant-state")}
    prepped = up = False
    try:
        prep = run([splitbrain, "lab", "vagrant-prep", "--subnet", subnet, "--env"], 1800, env)
        prepped = True
        assert prep.returncode == 0, prep.stderr or prep.stdout
        for line in prep.stdout.splitlines():
            if line.startswith("export ") and "=" in line:
                k, v = line.removeprefix("export ").split("=", 1)
                env[k] = v
        assert env.get("SPLITBRAIN_NET") == subnet, prep.stdout
        up = True
        boot = run(["vagrant", "up", "--provider", "libvirt"], 3600, env)
        assert boot.returncode == 0, (boot.stderr or boot.stdout)[-3000:]
        camp = run(
            [
                splitbrain,
                "run",
                "--vagrant",
                ".",
                "--nemesis",
                "partition,kill",
                "--time-limit",
                "30",
                "--store",
                str(tmp_path / "store"),
                "--no-progress",
            ],
            1800,
            env,
        )
        # A verdict, valid or not, is what the path promises: exit 0 (valid) or 1.
        assert camp.returncode in (0, 1), (camp.stderr or camp.stdout)[-3000:]
        results = list((tmp_path / "store").glob("*/*/results.json"))
        assert results, camp.stdout[-2000:]
        assert json.loads(results[0].read_text())["valid"] in (True, False)
    finally:
        errors = []
        if up:
            d = run(["vagrant", "destroy", "-f"], 1200, env)
            if d.returncode != 0:
                errors.append(f"vagrant destroy: {(d.stderr or d.stdout)[-500:]}")
        if prepped:
            t = run([splitbrain, "lab", "vagrant-prep", "--teardown"], 600, env)
            if t.returncode != 0:
                errors.append(f"vagrant-prep --teardown: {(t.stderr or t.stdout)[-500:]}")
        # A failed cleanup fails the test, but never hides the failure before it.
        if errors and sys.exc_info()[0] is None:
            pytest.fail("; ".join(errors))
