"""explain.cut: how every message past its bound is shortened."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from policies import explain


def test_a_text_within_its_bound_is_untouched() -> None:
    assert explain.cut("abc", 3) == "abc"
    assert explain.cut("abc", 3, keep_end=2) == "abc"


def test_a_long_text_is_cut_at_its_end_or_before_what_it_ends_with() -> None:
    assert explain.cut("abcdef", 4) == "abc…"
    assert explain.cut("abcdef", 4, keep_end=2) == "a…ef"
    # An end longer than the bound leaves only the ellipsis and the last characters.
    assert explain.cut("abcdef", 4, keep_end=9) == "…def"


@given(st.text(max_size=60), st.integers(1, 30), st.integers(0, 40))
def test_a_cut_text_fits_its_bound_and_keeps_its_start_or_end(
        text: str, limit: int, keep_end: int) -> None:
    cut = explain.cut(text, limit, keep_end)
    assert len(cut) <= limit
    if len(text) > limit:
        kept = min(keep_end, limit - 1)
        assert cut.count("…") >= 1 and cut.startswith(text[:limit - 1 - kept])
        assert cut.endswith(text[len(text) - kept:] if kept else "…")
