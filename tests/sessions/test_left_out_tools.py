"""``left_out_tools`` (the hosted tools a bridged Responses request left out of the
prompt) survives every stored form, and is shown only when set."""

from __future__ import annotations

from array import array

from seedproxy.sessions import Interaction
from seedproxy.sessions.codec import decode, encode


def turn(left_out: list[str] | None) -> Interaction:
    return Interaction(interaction_id="i0", request_index=0, seeds=[7], endpoint="/v1/responses",
                       request={"input": "x"}, response={"output": []},
                       prompt_token_ids=array("i", [1, 2]), left_out_tools=left_out)


def test_left_out_tools_round_trips_through_the_packed_and_the_json_form() -> None:
    named = turn(["web_search", "file_search"])
    assert decode(encode(named)).interaction.left_out_tools == ["web_search", "file_search"]
    assert Interaction.from_storage(named.to_storage()).left_out_tools == [
        "web_search", "file_search"]
    assert named.to_dict()["left_out_tools"] == ["web_search", "file_search"]


def test_a_turn_that_left_nothing_out_has_no_such_field() -> None:
    plain = turn(None)
    assert "left_out_tools" not in plain.to_dict()
    assert "left_out_tools" not in plain.to_storage()
    assert decode(encode(plain)).interaction.left_out_tools is None
