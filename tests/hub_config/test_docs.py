"""The README: the two commands first, and a configuration reference that matches the traits."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets import Float, HasTraits, Int

from jupyter_gpuburst import docs_traits

REPO = Path(__file__).resolve().parents[2]


def test_readme_starts_with_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert lines[0] == "# jupyter-gpuburst"
    block = lines[lines.index("```bash") + 1 : lines.index("```")]
    assert [line.split("#")[0].strip() for line in block] == ["make demo", "make test"]
    assert lines.index("```bash") < 4


def test_readme_config_reference_is_current():
    assert docs_traits.main(["--check", str(REPO / "README.md")]) == 0


def test_reference_lists_every_placement_trait_once():
    text = docs_traits.render()
    for name in ("strategy", "donor_order", "group_donor_caps", "queue_when_full", "max_redirects"):
        assert text.count(f"| `c.GPUBurstSpawner.{name}` |") == 1
    # KubeSpawner's own options are documented upstream, not repeated here
    assert "c.GPUBurstSpawner.image`" not in text and "profile_list" not in text


def test_check_detects_a_stale_reference(tmp_path):
    stale = tmp_path / "README.md"
    stale.write_text(f"# x\n{docs_traits.BEGIN}\nold\n{docs_traits.END}\n")
    assert docs_traits.main(["--check", str(stale)]) == 1
    assert docs_traits.main(["--write", str(stale)]) == 0
    assert docs_traits.main(["--check", str(stale)]) == 0
    assert "| `c.GPUBurstSpawner.strategy` |" in stale.read_text()


def test_missing_markers_and_missing_help_are_errors():
    with pytest.raises(ValueError, match="markers not found"):
        docs_traits.splice("no markers here", "x")

    class Thing(HasTraits):
        documented = Int(1, config=True, help="Counted things.")
        undocumented = Float(config=True)

    Thing.__module__ = "jupyter_gpuburst.example"
    with pytest.raises(ValueError, match="undocumented"):
        docs_traits.render([("Thing", "an example", Thing)])
