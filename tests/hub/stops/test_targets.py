"""What the capacity page's stop buttons send is read back into a user, a server and a GPU kernel."""

from __future__ import annotations

import pytest
from tornado import web

from jupyter_gpuburst.hub.capacity.tracker import kernel_key, server_key
from jupyter_gpuburst.hub.stops.handlers import parse_target


def test_the_page_keys_are_read_back():
    assert parse_target(server_key("alice")) == ("alice", "", None)
    assert parse_target(server_key("alice", "gpu")) == ("alice", "gpu", None)
    assert parse_target(kernel_key("bob", "1c60c284e87a")) == ("bob", "", "1c60c284e87a")


@pytest.mark.parametrize("bad", [None, 3, "alice", "/gpu", "bob/kernel:", "x" * 600 + "/"])
def test_anything_else_is_a_short_400(bad):
    with pytest.raises(web.HTTPError) as refused:
        parse_target(bad)
    assert refused.value.status_code == 400 and len(refused.value.log_message) < 120
