"""completions/ and man/ are generated from the click command tree and must be current."""
import difflib

import click

from conftest import ROOT
from hypnos.cli.gen_docs import _commands, generated, man_page
from hypnos.cli.main import cli


def test_generated_files_are_up_to_date():
    for rel, text in generated().items():
        path = ROOT / rel
        assert path.exists(), f"{rel} is missing: run python -m hypnos.cli.gen_docs"
        diff = "".join(difflib.unified_diff(path.read_text().splitlines(True),
                                            text.splitlines(True), rel, "generated"))
        assert not diff, f"{rel} is stale: run python -m hypnos.cli.gen_docs\n{diff}"


def test_every_command_and_option_is_in_the_man_page():
    page = man_page()
    for path, cmd in _commands(cli, "hypnos"):
        assert path.replace("-", "\\-") in page
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[-1].replace("-", "\\-") in page, (path, param.opts)
