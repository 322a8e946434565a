"""SPDY/3.1 framing as our kubelet API reads and writes it (sim/kube/spdy.py). kube-apiserver itself
judges it in tests/kube/test_kubelet_api.py; here each frame the client may send, in pieces."""

from __future__ import annotations

import struct
import zlib

from jupyter_gpuburst.sim.kube import spdy


class Client:
    """The client's side: its own header compression context, as spdystream keeps one."""

    def __init__(self) -> None:
        self.deflate = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, spdy.DICTIONARY)
        self.inflate = zlib.decompressobj(zdict=spdy.DICTIONARY)

    def syn_stream(self, stream_id: int, headers: dict[str, str], flags: int = 0) -> bytes:
        block = self.deflate.compress(spdy.name_value_block(headers)) + self.deflate.flush(zlib.Z_SYNC_FLUSH)
        return spdy.control_frame(spdy.SYN_STREAM, flags, struct.pack(">IIH", stream_id, 0, 0) + block)


def frames(data: bytes) -> list[tuple[bool, int, int, bytes]]:
    """(control, type or stream id, flags, payload) of each frame in ``data``."""
    out = []
    while data:
        first, second = struct.unpack_from(">II", data)
        size = 8 + (second & 0xFFFFFF)
        control = bool(first & 0x80000000)
        out.append((control, first & 0xFFFF if control else first, second >> 24, data[8:size]))
        data = data[size:]
    return out


async def test_streams_are_answered_and_carry_data_both_ways():
    sent = bytearray()
    session = spdy.Session(sent.extend)
    client = Client()
    wire = client.syn_stream(1, {"streamType": "error"}) + client.syn_stream(3, {"streamtype": "stdin"})
    wire += spdy.data_frame(3, 0, b"typed") + spdy.data_frame(3, spdy.FLAG_FIN, b"")
    wire += spdy.control_frame(spdy.PING, 0, struct.pack(">I", 7))
    wire += spdy.control_frame(spdy.WINDOW_UPDATE, 0, struct.pack(">II", 1, 4096))  # no windows kept: ignored
    # the connection's bytes come in any pieces
    for i in range(0, len(wire), 5):
        assert session.feed_data(wire[i : i + 5]) == (False, b"")
    error, stdin = session.streams.get_nowait(), session.streams.get_nowait()
    assert (error.id, error.headers) == (1, {"streamtype": "error"})
    assert stdin.headers == {"streamtype": "stdin"}
    assert stdin.received.get_nowait() == b"typed" and stdin.received.get_nowait() is None
    replies = frames(bytes(sent))
    assert [(c, t) for c, t, _, _ in replies] == [(True, spdy.SYN_REPLY), (True, spdy.SYN_REPLY), (True, spdy.PING)]
    assert struct.unpack(">I", replies[0][3][:4])[0] == 1 and struct.unpack(">I", replies[1][3][:4])[0] == 3
    # the replies' header blocks continue one zlib stream, as the client reads them
    assert spdy.parse_name_value_block(client.inflate.decompress(replies[0][3][4:])) == {}
    assert spdy.parse_name_value_block(client.inflate.decompress(replies[1][3][4:])) == {}
    assert replies[2][3] == struct.pack(">I", 7)

    sent.clear()
    error.write(b'{"status":"Success"}')
    error.close()
    error.close()  # ended once
    error.write(b"after the end")  # nothing goes out on an ended stream
    assert frames(bytes(sent)) == [(False, 1, 0, b'{"status":"Success"}'), (False, 1, spdy.FLAG_FIN, b"")]


async def test_a_reset_or_a_lost_connection_ends_what_waits():
    session = spdy.Session(lambda data: None)
    client = Client()
    session.feed_data(client.syn_stream(1, {"streamtype": "stdout"}) + client.syn_stream(3, {"streamtype": "stdin"}))
    stdout, stdin = session.streams.get_nowait(), session.streams.get_nowait()
    session.feed_data(spdy.control_frame(spdy.RST_STREAM, 0, struct.pack(">II", 1, spdy.RST_CANCEL)))
    assert stdout.closed and stdout.received.get_nowait() is None
    session.feed_eof()
    assert stdin.received.get_nowait() is None and session.streams.get_nowait() is None


async def test_a_frame_that_cannot_be_read_ends_the_connection():
    session = spdy.Session(lambda data: None)
    # a SYN_STREAM whose header block is not zlib
    session.feed_data(spdy.control_frame(spdy.SYN_STREAM, 0, struct.pack(">IIH", 1, 0, 0) + b"not zlib"))
    assert session.ended and session.streams.get_nowait() is None
