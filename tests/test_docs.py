"""docs/configuration.md documents every setting there is, and no setting that is not; the README
opens with the two commands."""

from __future__ import annotations

import re
from pathlib import Path

from indexer.settings import IndexSettings
from service.config.settings import ServiceSettings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


def test_every_setting_is_in_the_readme_table() -> None:
    fields = set(IndexSettings.model_fields) | set(ServiceSettings.model_fields)
    expected = {f"ATTEND_{name.upper()}" for name in fields}
    table = CONFIGURATION
    documented = set(re.findall(r"`(ATTEND_[A-Z_]+)`", table))
    assert documented == expected


def test_readme_opens_with_the_two_commands() -> None:
    block = README.split("```")[1]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()[1:]]
    assert commands == ["make demo", "make test"]
