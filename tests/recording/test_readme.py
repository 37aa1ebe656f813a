"""The README's "Testing your integration" cannot rot: its example is this directory's
``test_readme_example.py``, byte for byte, and it names every fixture, marker and option."""

from __future__ import annotations

import re
from pathlib import Path

from worker.testing import plugin

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = Path(__file__).with_name("test_readme_example.py")


def _section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Testing your integration")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end != -1 else len(readme)]


def test_the_readme_example_is_the_test_file() -> None:
    blocks = re.findall(r"```python\n(.*?)```", _section(), flags=re.DOTALL)
    assert blocks, "the section has a Python example"
    assert blocks[0] == EXAMPLE.read_text()


def test_the_readme_names_every_fixture_marker_and_option() -> None:
    section = _section()
    fixtures = [name for name in plugin.__all__ if not name.endswith("_MARK")]
    for name in [*fixtures, plugin.LIVE_MARK, plugin.REPLAY_MARK]:
        assert f"`{name}" in section or f"mark.{name}" in section, name
    for option in ("--decisions-live", "--decisions-replay", "decisions record --dir"):
        assert option in section, option
