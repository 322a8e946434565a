"""Ports for servers started later come from outside the range outgoing connections draw from."""

from __future__ import annotations

import socket
import time

import pytest

from jupyter_gpuburst.hub import ports


@pytest.fixture(autouse=True)
def notes(tmp_path, monkeypatch):
    """Each test keeps its own notes of chosen ports (other processes keep theirs)."""
    directory = tmp_path / "ports"
    monkeypatch.setattr(ports, "reservations", lambda: directory)
    return directory


def unnoted_free_port(notes) -> int:
    """A free port that a later draw may choose (as if another process had noted it long ago)."""
    port = ports.free_port()
    (notes / str(port)).unlink()
    return port


def test_free_ports_avoid_the_ephemeral_range_and_are_bindable():
    low, high = ports.ephemeral_range()
    chosen = ports.free_ports(50)
    assert len(set(chosen)) == 50
    for port in chosen:
        assert not low <= port <= high
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_taken_by_a_client_connection_is_passed_over(tmp_path, monkeypatch, notes):
    """The collision behind the dead proxy API: a port that is some client socket's local port."""
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client.connect(server.getsockname())
        taken = client.getsockname()[1]
        spare = unnoted_free_port(notes)

        class Draws:  # the random draw lands on the taken port first
            def __init__(self):
                self.values = [taken, spare]

            def randint(self, low, high):
                return self.values.pop(0)

        range_file = tmp_path / "range"
        range_file.write_text("1024 1100\n")  # both ports lie outside it
        monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", str(range_file))
        assert ports.free_port(rng=Draws()) == spare


def test_an_unreadable_range_falls_back_to_the_kernel_default(tmp_path):
    assert ports.ephemeral_range(str(tmp_path / "missing")) == ports.DEFAULT_EPHEMERAL_RANGE
    (tmp_path / "bad").write_text("nonsense")
    assert ports.ephemeral_range(str(tmp_path / "bad")) == ports.DEFAULT_EPHEMERAL_RANGE


def test_ports_browsers_refuse_are_never_chosen(tmp_path, monkeypatch, notes):
    """10080 is a "bad port" (Fetch standard): a hub there shows a student ERR_UNSAFE_PORT."""
    spare = unnoted_free_port(notes)

    class Draws:  # the random draw lands on the blocked port first
        def __init__(self):
            self.values = [10080, spare]

        def randint(self, low, high):
            return self.values.pop(0)

    range_file = tmp_path / "range"
    range_file.write_text("32768 60999\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", str(range_file))
    assert ports.free_port(rng=Draws()) == spare
    assert ports.browser_blocks(10080) and ports.browser_blocks(6667) and not ports.browser_blocks(8000)


def test_two_choices_at_once_never_get_the_same_port(notes):
    """Two processes drawing the same numbers (a port is bound only a while after it is chosen):
    the second passes over the port the first noted, until the note is old."""
    import random

    first = ports.free_port(rng=random.Random(7))
    second = ports.free_port(rng=random.Random(7))
    assert first != second
    assert (notes / str(first)).exists() and (notes / str(second)).exists()
    # a note older than RESERVED_S holds nothing: its server bound the port long ago, or died
    assert ports.reserve(first, now=time.time() + ports.RESERVED_S + 1)
    assert not ports.reserve(second)


def test_without_a_place_for_notes_the_draw_goes_on(notes, monkeypatch):
    notes.write_text("a file where the directory should be")
    assert ports.reserve(12345) and ports.free_port() > 0
