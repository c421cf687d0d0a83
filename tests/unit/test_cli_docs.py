"""completions/ and man/ are generated from the click command tree and the config schema and
must be current; every command, option and config key is documented."""
import dataclasses
import difflib
import os
import subprocess
import sys
import typing

import click

from conftest import ROOT
from hypnos.bench.harness import free_port
from hypnos.cli.config_doc import EXTRA_HELP, config_keys
from hypnos.cli.gen_docs import _commands, _page_name, config_page, generated, man_page
from hypnos.cli.main import cli
from hypnos.service.config import schema as config_schema


def test_generated_files_are_up_to_date():
    files = generated()
    for rel, text in files.items():
        path = ROOT / rel
        assert path.exists(), f"{rel} is missing: run python -m hypnos.cli.gen_docs"
        diff = "".join(difflib.unified_diff(path.read_text().splitlines(True),
                                            text.splitlines(True), rel, "generated"))
        assert not diff, f"{rel} is stale: run python -m hypnos.cli.gen_docs\n{diff}"
    on_disk = {f"man/{p.name}" for p in (ROOT / "man").iterdir()}
    assert on_disk <= set(files), f"pages of no command: {on_disk - set(files)}"


def test_every_command_and_option_is_in_the_man_pages():
    page, files = man_page(), generated()
    for path, cmd in _commands(cli, "hypnos", groups=True):
        own = files[f"man/{_page_name(path)}.1"]
        assert path.replace("-", "\\-") in own
        if not isinstance(cmd, click.Group):
            assert path.replace("-", "\\-") in page
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                flag = param.opts[-1].replace("-", "\\-")
                assert flag in own, (path, param.opts)
                if not isinstance(cmd, click.Group):
                    assert flag in page, (path, param.opts)
    for code in ("0", "1", "2", "3"):
        assert f".B {code}\n" in page


def test_every_config_key_is_documented():
    keys = {k.path: k for k in config_keys()}
    page = config_page()
    # Walk the schema independently of config_doc: every field of every nested dataclass.
    expected = set()

    def walk(cls, prefix):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name == "source":
                continue
            expected.add(prefix + f.name)
            tp = hints[f.name]
            for cand in (tp, *typing.get_args(tp)):
                if isinstance(cand, type) and dataclasses.is_dataclass(cand):
                    walk(cand, prefix + f.name + ".")

    walk(config_schema.Config, "")
    assert set(keys) == expected
    for path, key in keys.items():
        assert key.help, f"config key {path} has no meaning: comment it in config_schema.py"
        assert f".B {path}\n" in page or f"[{path}]" in page or f"[[{path}]]" in page
    assert not set(EXTRA_HELP) - expected, "EXTRA_HELP names keys the schema no longer has"
    assert keys["server.request_log.level"].default == '"info"'


def test_model_ids_complete_from_the_catalog_when_no_server_answers():
    env = {**os.environ, "_HYPNOS_COMPLETE": "bash_complete",
           "COMP_WORDS": "hypnos tier move smol", "COMP_CWORD": "3",
           "HYPNOS_URL": f"http://127.0.0.1:{free_port()}"}
    out = subprocess.run([sys.executable, "-m", "hypnos.cli"], env=env, capture_output=True,
                         text=True, timeout=60).stdout
    assert "plain,smollm2:135m" in out.splitlines()
    env["COMP_WORDS"], env["COMP_CWORD"] = "hypnos tier move smollm2:135m ", "4"
    out = subprocess.run([sys.executable, "-m", "hypnos.cli"], env=env, capture_output=True,
                         text=True, timeout=60).stdout
    assert {"plain,1", "plain,tier2_pinned_ram"} <= set(out.splitlines())
