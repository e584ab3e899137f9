"""SSHRemote against the real sshd of lab hosts."""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from harness.control import connect
from harness.control.ssh import SSHRemote
from harness.core.errors import RemoteCommandError, RemoteError
from harness.core.remote import Remote

pytestmark = [pytest.mark.integration, pytest.mark.lab]


def test_run_on_every_host(lab, remotes):
    for h in lab.hosts():
        r = remotes[h.name]
        assert isinstance(r, Remote)
        res = r.run("hostname; ip -4 -o addr show dev eth0")
        name, addr_line = res.stdout.splitlines()
        assert name == h.name
        assert f" {h.address}/24 " in addr_line
        assert res.exit_status == 0 and res.ok


def test_exit_status_stderr_stdin_env(remotes):
    r = remotes["n1"]
    res = r.run("echo out; echo err >&2; exit 3", check=False)
    assert (res.exit_status, res.stdout, res.stderr) == (3, "out\n", "err\n")
    with pytest.raises(RemoteCommandError) as ei:
        r.run("echo boom >&2; exit 7")
    e = ei.value
    assert (e.host, e.exit_status, e.stderr) == ("n1", 7, "boom\n")
    assert "boom" in str(e) and "exited 7" in str(e)
    assert r.run("tr a-z A-Z", stdin="hello").stdout == "HELLO"
    assert r.run("wc -c", stdin=b"\x00\x01\x02").stdout.strip() == "3"
    env = {"SB_A": 'it\'s a "quoted" $value', "SB_B": "two words"}
    assert r.run('printf "%s|%s" "$SB_A" "$SB_B"', env=env).stdout == f"{env['SB_A']}|two words"
    big = r.run("head -c 300000 /dev/zero | tr '\\0' x").stdout
    assert len(big) == 300000


def test_secrets_not_logged(remotes, caplog):
    with caplog.at_level(logging.DEBUG, logger="harness.control.ssh"):
        remotes["n1"].run("true", env={"DB_PASSWORD": "hunter2-secret"})
    assert "DB_PASSWORD" in caplog.text
    assert "hunter2-secret" not in caplog.text


def test_timeout_gives_none_exit_status(remotes):
    t0 = time.monotonic()
    with pytest.raises(RemoteCommandError) as ei:
        remotes["n1"].run("echo started; sleep 5 & sleep 5; wait", timeout=0.5)
    assert ei.value.exit_status is None
    assert "timed out" in str(ei.value)
    assert time.monotonic() - t0 < 3
    # what the command started is killed too (in the background), children included
    deadline = time.monotonic() + 5
    while "sleep 5" in remotes["n1"].run("ps -e -o args=").stdout:
        assert time.monotonic() < deadline, "timed-out command still running"
        time.sleep(0.05)
    # the connection is still usable afterwards
    assert remotes["n1"].run("echo ok").stdout == "ok\n"


def test_host_key_verification(lab, tmp_path):
    h = lab.hosts()[0]
    other = lab.hosts()[1]
    # n2's key recorded under n1's address: a mismatch must be refused.
    lines = Path(h.known_hosts).read_text().splitlines()
    line = next(x for x in lines if x.startswith(other.address + " "))
    wrong = tmp_path / "known_hosts_wrong"
    wrong.write_text(line.replace(other.address, h.address, 1) + "\n")
    with pytest.raises(RemoteError, match="host key verification failed"):
        SSHRemote(replace(h, known_hosts=str(wrong))).run("true")
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    with pytest.raises(RemoteError, match="not in"):
        SSHRemote(replace(h, known_hosts=str(empty))).run("true")
    # the explicit opt-out connects anyway
    with SSHRemote(replace(h, known_hosts=str(empty), verify_host_key=False)) as r:
        assert r.run("hostname").stdout.strip() == h.name


def test_connect_failures_are_remote_errors(lab, tmp_path):
    h = lab.hosts()[0]
    with pytest.raises(RemoteError, match="cannot connect"):
        SSHRemote(replace(h, port=1), connect_timeout=2).run("true")
    badkey = tmp_path / "other_key"
    # a syntactically valid key that is not authorized
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    badkey.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(RemoteError, match="authentication failed"):
        SSHRemote(replace(h, key_path=str(badkey))).run("true")


def test_upload_download_roundtrip(remotes, tmp_path):
    r = remotes["n2"]
    src = tmp_path / "payload.bin"
    data = os.urandom(200_000)
    src.write_bytes(data)
    os.chmod(src, 0o750)
    remote = "/tmp/sb-test/deep/er/payload.bin"
    try:
        r.upload(str(src), remote)
        assert r.run(f"stat -c %a {remote}").stdout.strip() == "750"
        back = tmp_path / "back" / "payload.bin"
        r.download(remote, str(back))
        assert back.read_bytes() == data
        # replacing a running executable works (written beside it, then renamed)
        r.run(f"cp /bin/sleep {remote} && chmod 755 {remote}")
        pid = r.start_daemon(
            f"{remote} 30", pidfile="/tmp/sb-test/p.pid", logfile="/tmp/sb-test/p.log"
        )
        r.upload(str(src), remote)
        r.download(remote, str(back))
        assert back.read_bytes() == data
        r.run(f"kill {pid}")
        assert r.run("ls /tmp/sb-test/deep/er").stdout == "payload.bin\n"
        tree = tmp_path / "tree"
        (tree / "a" / "b").mkdir(parents=True)
        (tree / "top.txt").write_text("top")
        (tree / "a" / "b" / "leaf.txt").write_text("leaf")
        r.upload_tree(str(tree), "/tmp/sb-test/tree")
        out = r.run("cd /tmp/sb-test/tree && find . -type f | sort && cat a/b/leaf.txt").stdout
        assert out == "./a/b/leaf.txt\n./top.txt\nleaf"
        with pytest.raises(RemoteError, match="download"):
            r.download("/tmp/sb-test/nope", str(tmp_path / "nope"))
    finally:
        r.run("rm -rf /tmp/sb-test")


def test_daemon_lifecycle(remotes):
    r = remotes["n3"]
    pidfile, logfile = "/tmp/sb-daemon/sleep.pid", "/tmp/sb-daemon/sleep.log"
    try:
        t0 = time.monotonic()
        pid = r.start_daemon("sleep 300", pidfile=pidfile, logfile=logfile, chdir="/tmp")
        assert time.monotonic() - t0 < 5, "start_daemon must return at once"
        assert pid > 1
        assert r.run(f"cat {pidfile}").stdout.strip() == str(pid)
        assert r.run(f"cat /proc/{pid}/cmdline | tr '\\0' ' '").stdout.strip() == "sleep 300"
        assert r.daemon_running(pidfile)
        assert r.signal_daemon(pidfile, "STOP")
        assert r.run(f"grep ^State: /proc/{pid}/status").stdout.split()[1] == "T"
        assert r.signal_daemon(pidfile, "CONT")
        r.stop_daemon(pidfile, timeout=2)
        assert not r.daemon_running(pidfile)
        assert r.run(f"test -e {pidfile}", check=False).exit_status == 1
        assert r.run(f"test -e /proc/{pid}", check=False).exit_status == 1, "reaped by tini"
        assert not r.signal_daemon(pidfile, "TERM")
        r.stop_daemon(pidfile)  # nothing to stop: fine
        # a daemon that ignores TERM is KILLed after the timeout
        pid = r.start_daemon(
            "sh -c 'trap \"\" TERM; while :; do sleep 0.1; done'",
            pidfile=pidfile,
            logfile=logfile,
            env={"SB_X": "1"},
        )
        t0 = time.monotonic()
        r.stop_daemon(pidfile, timeout=0.5)
        assert 0.4 < time.monotonic() - t0 < 5
        assert not r.daemon_running(pidfile)
        # a pid file saying 1 (or 0) names no daemon: `kill -- -1` would hit every process
        for bogus in ("1", "0"):
            r.run(f"echo {bogus} > {pidfile}")
            assert not r.daemon_running(pidfile)
            assert not r.signal_daemon(pidfile, "CONT")
            r.stop_daemon(pidfile)
            assert r.run("ss -Hltn", check=False).exit_status == 0, "the host's sshd still answers"
    finally:
        r.run(
            f"kill -9 $(cat {pidfile} 2>/dev/null) 2>/dev/null; rm -rf /tmp/sb-daemon", check=False
        )


def test_reconnects_after_dropped_connection(remotes, lab):
    r = remotes["n4"]
    session_sshd = r.run("echo $PPID").stdout.strip()
    with connect(lab.hosts()[3]) as killer:
        killer.run(f"kill {session_sshd}")
    deadline = time.monotonic() + 5
    while r._client is not None and r._client.get_transport().is_active():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert r.run("hostname").stdout.strip() == "n4"
    assert r.run("echo $PPID").stdout.strip() != session_sshd


def test_threads_share_one_remote(remotes):
    r = remotes["n5"]
    seen: set[int] = set()
    lock = threading.Lock()

    def work(i: int) -> str:
        with lock:
            seen.add(id(r._get()))
        return r.run(f"echo {i}").stdout.strip()

    with ThreadPoolExecutor(8) as ex:
        assert list(ex.map(work, range(40))) == [str(i) for i in range(40)]
    assert len(seen) == 1, "one connection shared by every thread"


def test_input_is_never_sent_after_the_command_finished(remotes, caplog):
    """A command without input reads /dev/null, and one that stops reading early is not
    run again: an EOF sent after the server closed the session makes OpenSSH drop the
    whole connection, which once failed 8 threads' commands at once."""
    r = remotes["n4"]
    first = r._get()
    with caplog.at_level(logging.INFO, logger="harness.control.ssh"):
        assert r.run("cat; echo done").stdout == "done\n"
        for _ in range(20):
            assert r.run("true").exit_status == 0
        marker = f"/tmp/sb-ran-{os.getpid()}"
        r.run(f"rm -f {marker}")
        res = r.run(f"echo x >> {marker}; head -c 1", stdin=b"y" * 4_000_000)
        assert res.stdout == "y"
        assert r.run(f"cat {marker}").stdout == "x\n", "run exactly once"
    assert r._get() is first, "the connection survived"
    assert "retrying" not in caplog.text and "reconnecting" not in caplog.text


def test_partition_with_iptables(remotes, lab):
    hosts = {h.name: h for h in lab.hosts()}
    a, b = remotes["n1"], remotes["n2"]
    port = 7077
    pidfile = "/tmp/sb-listen.pid"
    listener = (
        f"python3 -c 'import socket; s = socket.socket(); "
        f"s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f's.bind(("0.0.0.0", {port})); s.listen(16)\n'
        f"while True: s.accept()[0].close()'"
    )
    probe = (
        f'python3 -c \'import socket; socket.create_connection(("{hosts["n2"].address}", '
        f"{port}), timeout=0.5)'"
    )
    rule = f"INPUT -s {hosts['n1'].address} -j DROP"
    try:
        b.start_daemon(listener, pidfile=pidfile, logfile="/tmp/sb-listen.log")
        deadline = time.monotonic() + 5
        while a.run(probe, check=False).exit_status != 0:
            assert time.monotonic() < deadline, "listener never answered"
        b.run(f"iptables -I {rule}")
        res = a.run(probe, check=False)
        assert res.exit_status != 0 and "timed out" in res.stderr
        # others still reach n2
        assert remotes["n3"].run(probe, check=False).exit_status == 0
        b.run(f"iptables -D {rule}")
        assert a.run(probe, check=False).exit_status == 0
    finally:
        b.run(f"iptables -D {rule} 2>/dev/null; true", check=False)
        b.stop_daemon(pidfile, timeout=1)


def test_sudo_and_env_wrapping_is_pure_logic():
    from harness.core.remote import Host

    deploy = SSHRemote(Host(name="x", address="127.0.0.9", user="deploy"))
    assert (
        deploy._wrap("id -u", True, {"A": "b c"})
        == "sudo -n -- sh -c 'export A='\"'\"'b c'\"'\"'; id -u'"
    )
    assert deploy._wrap("id -u", False, None) == "id -u"
    root = SSHRemote(Host(name="x", address="127.0.0.9"))
    assert root._wrap("id -u", True, None) == "id -u"
    with pytest.raises(ValueError, match="environment variable name"):
        root._wrap("true", False, {"BAD-NAME": "1"})


def test_paused_host_fails_fast_and_recovers(lab):
    h = lab.hosts()[4]
    cg = h.extras["cgroup"]
    if cg is None:
        pytest.skip("no freezer cgroup on this kernel")
    state = Path(cg, "freezer.state")
    if not state.exists():
        pytest.skip("needs the cgroup v1 freezer")
    with SSHRemote(h, connect_timeout=1.0) as r:
        r.run("true")
        try:
            # paused while a command runs: it times out like any other
            t0 = time.monotonic()
            threading.Timer(0.2, state.write_text, args=("FROZEN\n",)).start()
            with pytest.raises(RemoteCommandError) as ei:
                r.run("sleep 0.5; echo done", timeout=1.5)
            assert ei.value.exit_status is None
            # a new command cannot even open a session: fails within connect_timeout
            with pytest.raises(RemoteError, match="does not answer"):
                r.run("true", timeout=1.0)
            assert time.monotonic() - t0 < 5
        finally:
            state.write_text("THAWED\n")
        assert r.run("hostname").stdout == f"{h.name}\n"
