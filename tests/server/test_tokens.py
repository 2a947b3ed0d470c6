"""Token files and the tokens variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnfsm.errors import InvalidInput


def test_token_lines_with_comments_and_separators() -> None:
    from turnfsm.server import parse_tokens

    text = "# who may call\nt-1 alice\n\n t-2  bob  # the second\nt-3 carol; t-4 dave\n"
    assert parse_tokens(text, "tokens") == {
        "t-1": "alice",
        "t-2": "bob",
        "t-3": "carol",
        "t-4": "dave",
    }


@pytest.mark.parametrize(
    ("text", "entry"), [("t-1\n", 1), ("t-1 a\nt-2 b c\n", 2), ("t-1 a\nt-1 b\n", 2)]
)
def test_a_bad_entry_is_named(text: str, entry: int) -> None:
    from turnfsm.server import parse_tokens

    with pytest.raises(InvalidInput) as err:
        parse_tokens(text, "tokens.txt")
    assert err.value.where == f"tokens.txt, entry {entry}"


def test_the_file_wins_over_the_variable(tmp_path: Path) -> None:
    from turnfsm.server import TOKENS_ENV, load_tokens

    f = tmp_path / "tokens"
    f.write_text("from-file alice\n")
    env = {TOKENS_ENV: "from-env bob"}
    assert load_tokens(str(f), env) == {"from-file": "alice"}
    assert load_tokens(None, env) == {"from-env": "bob"}
    assert load_tokens(None, {}) == {}
    with pytest.raises(InvalidInput) as err:
        load_tokens(str(tmp_path / "missing"), env)
    assert err.value.where == "--tokens"
