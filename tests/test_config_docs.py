from helpers import REPO

from clmdetour.config_docs import render


def test_config_readme_is_generated_from_the_current_schema():
    current = (REPO / "config/README.md").read_text(encoding="utf-8")
    assert current == render(), "config/README.md is stale: run  python -m clmdetour.config_docs > config/README.md"


def test_every_leaf_key_of_the_paper_config_is_documented():
    import yaml

    doc = render()
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())

    def leaves(obj, path=""):
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield from leaves(v, f"{path}.{k}" if path else k)
        else:
            yield path

    import re
    for key in leaves(cfg):
        generic = re.sub(r"^(pretraining\.variants|tasks|reference_models)\.[^.]+", r"\1.<name>", key)
        generic = re.sub(r"^release\.repo_ids\.[^.]+", "release.repo_ids", generic)
        parts = generic.split(".")
        assert any(f"`{'.'.join(parts[:i])}`" in doc for i in range(len(parts), 0, -1)), key
