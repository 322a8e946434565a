"""What a failing test's report carries from the logs and the browser never includes a URL's token."""

from __future__ import annotations

from helpers.failure_logs import redact


def test_a_urls_token_and_xsrf_are_replaced_and_the_rest_kept():
    line = (
        "GET http://127.0.0.1:15121/lab?token=0a1b2c&reset=1 (net::ERR_FAILED), source: "
        'http://h/user/alice/api/kernels?_xsrf=2|abc|def#x "http://h/a?path=token=1"'
    )
    out = redact(line)
    assert "0a1b2c" not in out and "2|abc|def" not in out
    assert "lab?token=[secret]&reset=1" in out and "kernels?_xsrf=[secret]#x" in out
    # a parameter merely ending in "token" is not a token
    assert redact("/api?next_token_page=2&mytoken=5") == "/api?next_token_page=2&mytoken=5"
