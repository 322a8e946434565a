"""What the capacity page's stop buttons send is read back into a user, a server and a GPU kernel."""

from __future__ import annotations

import pytest
from tornado import web

from jupyter_gpuburst.hub.capacity.tracker import kernel_key, server_key
from jupyter_gpuburst.hub.stops.handlers import KERNEL_NOTE, SERVER_NOTE, note, parse_reason, parse_target


def test_the_page_keys_are_read_back():
    assert parse_target(server_key("alice")) == ("alice", "", None)
    assert parse_target(server_key("alice", "gpu")) == ("alice", "gpu", None)
    assert parse_target(kernel_key("bob", "1c60c284e87a")) == ("bob", "", "1c60c284e87a")


@pytest.mark.parametrize("bad", [None, 3, "alice", "/gpu", "bob/kernel:", "x" * 600 + "/"])
def test_anything_else_is_a_short_400(bad):
    with pytest.raises(web.HTTPError) as refused:
        parse_target(bad)
    assert refused.value.status_code == 400 and len(refused.value.log_message) < 120


def test_the_admins_reason_is_one_short_line_in_the_users_note():
    assert parse_reason(None) == parse_reason("  ") == ""
    assert parse_reason("The lab is over.\n\tGPUs go to\x00 the exam ") == "The lab is over. GPUs go to the exam"
    assert note(SERVER_NOTE, "") == "Your server was stopped by the hub's admins. Start it again when you need it."
    assert note(SERVER_NOTE, "the lab is over.") == (
        "Your server was stopped by the hub's admins: the lab is over. Start it again when you need it."
    )
    assert note(KERNEL_NOTE, "exam at 10:00") == (
        "This GPU kernel was stopped by the hub's admins: exam at 10:00. Restart the kernel to start it again on a free GPU."
    )


@pytest.mark.parametrize("bad", [3, ["why"], "x" * 201])
def test_a_bad_reason_is_a_short_400(bad):
    with pytest.raises(web.HTTPError) as refused:
        parse_reason(bad)
    assert refused.value.status_code == 400 and len(refused.value.log_message) < 80
