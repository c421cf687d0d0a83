"""service/mcp/files.py: which paths an MCP tool may read (server.mcp_file_roots), and
cli/mcp_config.py: the Claude Code MCP config `hypnos launch claude` registers."""
import json
import os
import stat

import pytest

from hypnos.cli.mcp_config import mcp_config, mcp_url, write_mcp_config
from hypnos.service.mcp.files import allowed_file, read_allowed, roots_of
from hypnos.service.mcp.refusal import ToolRefused


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    os.symlink(tmp_path / "secret.txt", root / "sub" / "out.txt")
    os.symlink(root / "sub" / "a.txt", root / "in.txt")
    return tmp_path, roots_of([str(root)], None)


def test_a_file_under_a_root_is_read(tree):
    tmp, roots = tree
    assert read_allowed(str(tmp / "root" / "sub" / "a.txt"), roots, 100, "x") == b"inside"
    # A link that stays inside the roots is followed.
    assert allowed_file(str(tmp / "root" / "in.txt"), roots) == tmp / "root" / "sub" / "a.txt"


@pytest.mark.parametrize("path, says", [
    ("{tmp}/secret.txt", "outside server.mcp_file_roots"),
    ("{tmp}/root/sub/out.txt", "outside server.mcp_file_roots"),       # a symlink out
    ("{tmp}/root/sub/../sub/a.txt", "'..'"),                           # even one that stays
    ("{tmp}/root/../secret.txt", "'..'"),
    ("root/sub/a.txt", "not absolute"),
    ("{tmp}/root/sub", "not a file"),
    ("{tmp}/root/missing.txt", "not a file"),
])
def test_paths_outside_or_with_dotdot_are_refused(tree, path, says):
    tmp, roots = tree
    with pytest.raises(ToolRefused, match=says):
        read_allowed(path.format(tmp=tmp), roots, 100, "x")


def test_no_roots_reads_nothing_and_the_size_limit_holds(tree):
    tmp, roots = tree
    with pytest.raises(ToolRefused, match="reads no files by path"):
        allowed_file(str(tmp / "root" / "sub" / "a.txt"), [])
    with pytest.raises(ToolRefused, match="is 6 bytes; x is 5"):
        read_allowed(str(tmp / "root" / "sub" / "a.txt"), roots, 5, "x")


def test_a_relative_root_is_the_config_files_folder(tmp_path):
    assert roots_of(["docs"], tmp_path) == [(tmp_path / "docs").resolve()]


def test_claude_code_mcp_config(tmp_path):
    assert mcp_url("http://127.0.0.1:9999/v1/") == "http://127.0.0.1:9999/mcp"
    assert mcp_config("http://h:1") == {"mcpServers": {"hypnos": {
        "type": "http", "url": "http://h:1/mcp"}}}
    path = write_mcp_config(tmp_path / "c" / "mcp.json", "http://h:1", "sk-1")
    assert json.loads(path.read_text()) == {"mcpServers": {"hypnos": {
        "type": "http", "url": "http://h:1/mcp",
        "headers": {"Authorization": "Bearer sk-1"}}}}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
