"""A split GGUF (gguf-split's ``NAME-00001-of-0000N.gguf``: a metadata-only first part, the
tensors in the others) is one model: its shape counts every part's tensors, tier 2 pins every
part, and a missing part is a clear error rather than a 12 MB model. Model-free: the parts are
a tiny random-weight Gemma 4 written with gguf-py's own splitter."""
import pytest

from tiny_gemma4 import write_tiny_gemma4
from hypnos.engines.gguf_meta import read_gguf_meta, split_parts
from hypnos.engines.page_cache import weight_files


@pytest.fixture()
def whole_and_split(tmp_path):
    (tmp_path / "whole").mkdir()
    (tmp_path / "split").mkdir()
    whole = write_tiny_gemma4(tmp_path / "whole" / "g4.gguf")
    first = write_tiny_gemma4(tmp_path / "split" / "g4.gguf", split_tensors=10)
    return whole, first


def test_the_parts_are_named_in_order(tmp_path):
    first = tmp_path / "m-00001-of-00003.gguf"
    assert [p.name for p in split_parts(first)] == [
        "m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"]
    assert split_parts(tmp_path / "m.gguf") == [tmp_path / "m.gguf"]
    assert split_parts(tmp_path / "m-00001-of-00001.gguf") == [tmp_path / "m-00001-of-00001.gguf"]


def test_a_split_model_has_the_shape_of_the_whole_one(whole_and_split):
    whole, first = whole_and_split
    parts = split_parts(first)
    assert len(parts) > 2 and all(p.is_file() for p in parts)
    a, b = read_gguf_meta(whole), read_gguf_meta(first)
    assert read_gguf_meta(parts[0]).architecture == "gemma4"
    assert b.tensor_bytes == a.tensor_bytes > 0
    assert b.layer_bytes == a.layer_bytes and b.non_layer_bytes == a.non_layer_bytes
    assert b.file_bytes == sum(p.stat().st_size for p in parts)
    assert b.to_shape().weights_bytes == a.to_shape().weights_bytes


def test_tier2_pins_every_part(whole_and_split):
    _, first = whole_and_split
    assert weight_files(first) == split_parts(first)


def test_a_missing_part_is_named(whole_and_split):
    _, first = whole_and_split
    gone = split_parts(first)[-1]
    gone.unlink()
    with pytest.raises(ValueError, match=f"part {gone.name} of the split model is missing"):
        read_gguf_meta(first)
