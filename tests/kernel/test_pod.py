"""The GPU kernel pod's entry point: where its connection key goes, and that no copy stays behind."""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import pytest

from jupyter_gpuburst.kernel import pod as kernel_pod

CONNECTION = {
    "key": "k" * 64,
    "signature_scheme": "hmac-sha256",
    "transport": "tcp",
    "ip": "0.0.0.0",
    "shell_port": 50001,
    "iopub_port": 50002,
    "stdin_port": 50003,
    "control_port": 50004,
    "hb_port": 50005,
}


def test_the_connection_leaves_the_environment_for_a_file_only_its_user_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp puts it
    environ = {kernel_pod.CONNECTION_ENV: json.dumps(CONNECTION), "OTHER": "1"}
    path = kernel_pod.write_connection_file(environ)
    assert kernel_pod.CONNECTION_ENV not in environ and environ == {"OTHER": "1"}
    assert json.loads(open(path).read()) == CONNECTION
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert os.path.dirname(os.path.dirname(path)) == str(tmp_path)


@pytest.mark.parametrize("raw", ["", "{not json"])
def test_a_missing_or_broken_connection_stops_the_pod_before_writing(tmp_path, monkeypatch, raw):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises((SystemExit, ValueError)):
        kernel_pod.write_connection_file({kernel_pod.CONNECTION_ENV: raw} if raw else {})
    assert list(tmp_path.iterdir()) == []


def test_a_pod_stopped_before_the_kernel_read_its_key_removes_it(tmp_path):
    # the window between writing the file and ipykernel reading it: IPython's imports, a second
    # or so, during which the pod may be deleted (SIGTERM)
    script = (
        "import sys, tempfile, time\n"
        "from jupyter_gpuburst.kernel.pod import remove_on_termination\n"
        "directory = tempfile.mkdtemp(dir=sys.argv[1])\n"
        "open(directory + '/kernel.json', 'w').write('{}')\n"
        "remove_on_termination(directory)\n"
        "print(directory, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        directory = proc.stdout.readline().strip()
        assert os.path.isfile(os.path.join(directory, "kernel.json"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM  # it still ends as SIGTERM ends a process
    finally:
        proc.kill()
        proc.wait()
    assert not os.path.exists(directory) and list(tmp_path.iterdir()) == []


def test_a_pre_started_kernel_waits_for_its_adopters_connection_and_env(tmp_path):
    import threading

    from jupyter_gpuburst.core import keys

    environ = {
        keys.KERNEL_CONNECTION_DIR_ENV: str(tmp_path),
        keys.KERNEL_POD_IP_ENV: "127.9.0.7",
        keys.KERNEL_PRELOAD_ENV: "json,no_such_module",
    }
    assert kernel_pod.preload(environ) == ["json"]  # what is not installed is skipped
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(kernel_pod.wait_for_adoption(environ, poll=0.01)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # nothing adopted it yet: it waits
    (tmp_path / keys.KERNEL_ADOPTER_FILE).write_text(json.dumps({"env": {"JUPYTERHUB_USER": "alice"}}))
    (tmp_path / keys.KERNEL_CONNECTION_FILE).write_text(json.dumps(CONNECTION))
    waiter.join(5)
    assert not waiter.is_alive()
    connection = json.loads(got[0])
    # the adopter's key; bound to the pod's own address; the adopter's user in its env
    assert connection["key"] == CONNECTION["key"] and connection["ip"] == "127.9.0.7"
    assert environ["JUPYTERHUB_USER"] == "alice"
    assert keys.KERNEL_CONNECTION_DIR_ENV not in environ and keys.KERNEL_POD_IP_ENV not in environ


def test_a_connection_shown_before_the_adopters_env_waits_for_it(tmp_path):
    """The kubelet links a Secret's new keys one at a time: with the connection there and not yet
    the adopter's file, the kernel waits, rather than start without its user."""
    import threading

    from jupyter_gpuburst.core import keys

    environ = {keys.KERNEL_CONNECTION_DIR_ENV: str(tmp_path)}
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(kernel_pod.wait_for_adoption(environ, poll=0.01)), daemon=True)
    waiter.start()
    (tmp_path / keys.KERNEL_CONNECTION_FILE).write_text(json.dumps(CONNECTION))
    waiter.join(0.3)
    assert waiter.is_alive() and "JUPYTERHUB_USER" not in environ
    (tmp_path / keys.KERNEL_ADOPTER_FILE).write_text(json.dumps({"env": {"JUPYTERHUB_USER": "bob"}}))
    waiter.join(5)
    assert not waiter.is_alive() and environ["JUPYTERHUB_USER"] == "bob"
    assert json.loads(got[0])["key"] == CONNECTION["key"]


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "polling"])
def test_a_waiting_kernel_sleeps_until_its_connection_is_written(tmp_path, monkeypatch, inotify):
    """With inotify it wakes on the kubelet's write, not on its safety-net look (set to a minute
    here); without, it polls."""
    import threading
    import time

    from jupyter_gpuburst.core import keys

    monkeypatch.setattr(kernel_pod, "FALLBACK_POLL_S", 60.0)
    if not inotify:
        monkeypatch.setattr(kernel_pod.DirectoryChanges, "open", classmethod(lambda cls, d: None))
    elif kernel_pod.DirectoryChanges.open(str(tmp_path)) is None:
        pytest.skip("no inotify here")
    environ = {keys.KERNEL_CONNECTION_DIR_ENV: str(tmp_path)}
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(kernel_pod.wait_for_adoption(environ, poll=0.01)), daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()
    # as a kubelet updates a Secret volume: the new content written aside, then renamed into place
    (tmp_path / keys.KERNEL_ADOPTER_FILE).write_text(json.dumps({"env": {}}))
    staged = tmp_path / "..data_tmp"
    staged.write_text(json.dumps(CONNECTION))
    written = time.monotonic()
    os.replace(staged, tmp_path / keys.KERNEL_CONNECTION_FILE)
    waiter.join(10)
    # at the write, not at the 60 s safety-net look; a loaded machine may take a few seconds
    assert not waiter.is_alive() and time.monotonic() - written < 10
    assert json.loads(got[0])["key"] == CONNECTION["key"]


def test_a_waiting_kernel_answers_its_probe_on_the_heartbeat_port_and_frees_it_for_ipykernel():
    import socket

    from jupyter_gpuburst.core import keys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environ = {keys.KERNEL_READY_PORT_ENV: str(port), keys.KERNEL_POD_IP_ENV: "127.0.0.1"}
    ready = kernel_pod.hold_ready_port(environ)
    assert ready is not None and keys.KERNEL_READY_PORT_ENV not in environ
    for _ in range(3):  # the kubelet's TCP probe, period after period
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    ready.close()
    assert not ready.thread.is_alive()
    # ipykernel's heartbeat binds the same port next
    with socket.create_server(("127.0.0.1", port)):
        pass
    assert kernel_pod.hold_ready_port({}) is None


class InterruptedFlush(io.StringIO):
    """A kernel's stdout whose flush is interrupted: SIGINT landing while ipykernel waits for
    its IO thread to send what was written."""

    def flush(self) -> None:
        raise KeyboardInterrupt


def test_the_first_cells_note_leaves_no_wait_for_an_interrupt_to_be_lost_in(monkeypatch):
    from IPython.core.events import EventManager, available_events

    swallowed = []  # IPython swallows what a pre_run_cell callback raises, interrupts included
    shell = SimpleNamespace(showtraceback=lambda: swallowed.append(sys.exc_info()[0]))
    shell.events = EventManager(shell, available_events)
    out = InterruptedFlush()
    monkeypatch.setattr(sys, "stdout", out)
    kernel_pod.note_once(shell, "Note: scratch space only.")
    for _ in range(2):
        shell.events.trigger("pre_run_cell", None)
    assert swallowed == []
    assert out.getvalue() == "Note: scratch space only.\n"  # with the first cell only
