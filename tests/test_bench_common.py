"""``benchmarks/common.py``: what the benchmark sections share."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from common import by_group  # noqa: E402


def test_by_group_puts_the_zoo_first_and_the_fresh_configs_after_in_their_order() -> None:
    rows = [("fresh_b", 1), ("hf_bert", 2), ("fresh_a", 3), ("tiny_gpt", 4)]
    assert by_group(rows, lambda row: row[0]) == {
        "zoo": [("hf_bert", 2), ("tiny_gpt", 4)], "fresh": [("fresh_b", 1), ("fresh_a", 3)]}
    assert list(by_group(reversed(rows), lambda row: row[0])) == ["zoo", "fresh"]


def test_by_group_leaves_out_a_group_with_no_item() -> None:
    assert by_group(["hf_bert", "hf_gpt2"], str) == {"zoo": ["hf_bert", "hf_gpt2"]}
    assert by_group(["fresh_bert_3x256_128"], str) == {"fresh": ["fresh_bert_3x256_128"]}
    assert by_group([], str) == {}
