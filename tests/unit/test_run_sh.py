"""run.sh's own logic, run for real in a copy of the tree whose pip, python, hypnos and
installer helpers are stand-ins that only write down how they were called: which extras each
command installs, when the stamp lets it install nothing, and what `./run.sh models ...`
turns into. Fast, and nothing is installed."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from hypnos.cli.main import cli

STAND_IN = '#!/bin/sh\necho "{name} $*" >> "$CALLS"\n'
DEFAULT = "llama,stt,tts,embeddings,docs"


@pytest.fixture
def tree(tmp_path):
    """A copy of run.sh, pyproject.toml and man/ with stand-ins for everything it runs."""
    root = tmp_path / "hypnos"
    (root / "cli").mkdir(parents=True)
    for name in ("run.sh", "pyproject.toml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "man", root / "man")
    (root / "cli" / "gpu_install.py").write_text(
        "import sys\nif sys.argv[1] == 'plan': print('cpu')\n")
    (root / "cli" / "llama_build.py").write_text("")
    for folder, names in ((".venv/bin", ("python", "pip", "hypnos")), ("sys", ("apt-get",))):
        (root / folder).mkdir(parents=True)
        for name in names:       # apt-get: `test` installs Chromium when it is missing
            (root / folder / name).write_text(STAND_IN.format(name=name))
            (root / folder / name).chmod(0o755)
    return root


def run(root, *args, **env):
    calls = root / "calls"
    calls.write_text("")
    full = {"PATH": f"{root / 'sys'}:{os.path.dirname(sys.executable)}:/usr/bin:/bin",
            "CALLS": str(calls), "HOME": str(root), **env}
    r = subprocess.run([str(root / "run.sh"), *args], capture_output=True, text=True,
                       env=full, timeout=60)
    assert r.returncode == 0, r.stderr
    return calls.read_text().splitlines()


def installs(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("pip install")]


def stamp(root) -> str:
    return (root / ".venv" / ".hypnos-installed").read_text().split()[0]


def test_serve_installs_no_gliner_and_test_adds_it_once(tree):
    first = run(tree, "serve")
    assert installs(first) == [f'pip install -q -e .[{DEFAULT},test]']    # no torch, no ner
    assert "hypnos serve" in first and stamp(tree) == f"extras={DEFAULT}"
    assert installs(run(tree, "serve")) == []                     # the stamp holds them
    test = run(tree, "test", "-x")
    assert installs(test) == ["pip install -q torch==2.13.0",
                              f"pip install -q -e .[{DEFAULT},ner,test]"]
    assert test[-1].startswith("python -m pytest -q -x")
    assert stamp(tree) == f"extras={DEFAULT},ner"
    assert installs(run(tree, "test")) == [] and installs(run(tree, "serve")) == []


def test_a_changed_pyproject_reinstalls_every_extra_the_venv_has(tree):
    run(tree, "test")
    with open(tree / "pyproject.toml", "a") as f:
        f.write("\n# changed\n")
    assert installs(run(tree, "serve")) == ["pip install -q torch==2.13.0",
                                            f"pip install -q -e .[{DEFAULT},ner,test]"]


def test_a_stamp_written_before_the_split_is_honoured(tree):
    run(tree, "serve")
    path = tree / ".venv" / ".hypnos-installed"
    rest = path.read_text().split(" ", 1)[1]
    path.write_text(f"extras={DEFAULT},ner {rest}")     # the old default, ner included
    assert installs(run(tree, "test")) == [] and installs(run(tree, "serve")) == []


def test_hypnos_extras_is_kept_and_test_still_adds_ner(tree):
    assert installs(run(tree, "test", HYPNOS_EXTRAS="llama,images")) == [
        "pip install -q torch==2.13.0", "pip install -q -e .[llama,images,ner,test]"]
    assert installs(run(tree, "test", HYPNOS_EXTRAS="all"))[-1] == \
        "pip install -q -e .[llama,images,ner,all,test]"      # "all" holds ner: not added
    assert installs(run(tree, "test")) == [] and installs(run(tree, "serve")) == []


def test_models_passes_its_subcommands_through_and_pulls_the_rest(tree):
    run(tree, "serve")
    assert run(tree, "models", "smollm2:135m")[-1] == "hypnos models pull smollm2:135m"
    for sub in cli.commands["models"].commands:
        assert run(tree, "models", sub, "x")[-1] == f"hypnos models {sub} x", sub
    assert run(tree, "models", "--help")[-1] == "hypnos models --help"


def test_the_dry_run_shows_the_extras_of_the_command(tree):
    for args, extras in ((["serve"], DEFAULT), (["test"], DEFAULT + ",ner")):
        r = subprocess.run([str(ROOT / "run.sh"), *args], capture_output=True, text=True,
                           env={**os.environ, "HYPNOS_DRY_RUN": "1", "HYPNOS_GPU": "cpu"},
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert f'install -q -e ".[{extras},test]"' in r.stdout
        assert ("torch==2.13.0" in r.stdout) == ("ner" in extras)
