"""Issue 59 item 5: a rule that the project states in one place is written in one place (a text search that
can fail: each test also runs its search on a planted second copy)."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: A rule's tell-tale code or wording -> the one file allowed to hold it.
ONE_HOME = {
    r"no learning-rate grid \(set": "src/clmdetour/settings.py",  # the empty-grid refusal
    r"is not strictly increasing \(the sweep": "src/clmdetour/settings.py",  # the grid-order refusal
    r"\bglobal_batch\s*%": "src/clmdetour/config/batch.py",  # the batch division rule
    r"is not divisible by cluster\.pretrain_nodes": "src/clmdetour/config/batch.py",
}


def homes(pattern: str, root: Path) -> list[str]:
    """The files under ``root/src`` whose text matches ``pattern``, relative to ``root``."""
    rx = re.compile(pattern)
    return sorted(p.relative_to(root).as_posix() for p in (root / "src").rglob("*.py")
                  if rx.search(p.read_text(encoding="utf-8")))


def test_each_rule_has_one_home():
    for pattern, home in ONE_HOME.items():
        assert homes(pattern, REPO) == [home], pattern


def test_the_search_finds_a_second_copy(tmp_path):
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "sweep.py").write_text('if not grid:\n    raise ValueError("no learning-rate grid")\n')
    (tmp_path / "src" / "a" / "data.py").write_text("if global_batch % world:\n    raise ValueError\n")
    assert homes(r"no learning-rate grid", tmp_path) == ["src/a/sweep.py"]
    assert homes(r"\bglobal_batch\s*%", tmp_path) == ["src/a/data.py"]
