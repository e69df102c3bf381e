"""The refusal on the wire (SPEC §9): status 200, content type and
retry-after headers, one SSE error event."""

from __future__ import annotations

import json

import pytest

import pacer


def test_frame_is_spec_section_9() -> None:
    status, headers, body = pacer.refusal_response(4, message_prefix="slow down")
    assert status == 200
    assert headers == {"content-type": "text/event-stream; charset=utf-8", "retry-after": "4"}
    assert body == (
        b'data: {"type":"error","sequence_number":0,"error":{"type":"rate_limit_error","code":"429",'
        b'"message":"slow down; retry after 4s","param":null,"retry_after_seconds":4}}\n\n'
    )


def test_default_prefix_and_named_fields() -> None:
    response = pacer.refusal_response(15)
    assert isinstance(response, tuple) and len(response) == 3
    assert response.status == 200 and response.headers["retry-after"] == "15"
    event = json.loads(response.body.decode("utf-8").removeprefix("data: ").removesuffix("\n\n"))
    assert event["error"]["message"] == pacer.DEFAULT_MESSAGE_PREFIX + "; retry after 15s"
    assert event["error"]["retry_after_seconds"] == 15


@pytest.mark.parametrize("prefix", ['quote " and backslash \\', "line\nbreak\ttab", "naïve ✓ 🚦", "\x01\x1f", ""])
def test_prefix_is_json_escaped(prefix: str) -> None:
    _, _, body = pacer.refusal_response(2, message_prefix=prefix)
    assert body.startswith(b"data: ") and body.endswith(b"\n\n") and body.count(b"\n") == 2
    event = json.loads(body.decode("utf-8")[len("data: "):-2])
    assert event == {
        "type": "error",
        "sequence_number": 0,
        "error": {"type": "rate_limit_error", "code": "429", "message": prefix + "; retry after 2s",
                  "param": None, "retry_after_seconds": 2},
    }


def test_long_prefix_and_u64_hint() -> None:
    prefix = "x" * 10_000
    _, headers, body = pacer.refusal_response(2**64 - 1, message_prefix=prefix)
    assert headers["retry-after"] == "18446744073709551615"
    assert json.loads(body[6:-2])["error"]["message"] == prefix + "; retry after 18446744073709551615s"
