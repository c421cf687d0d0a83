"""Optional catalog files (``optional = "mtp"``: an MTP draft head pulled for
``speculative = "mtp"``), and the catalog's MTP heads: each one a checked optional file, or
a note saying why it is not one yet."""
import re

import pytest

from hypnos.catalog.catalog import CatalogError, load_catalog, optional_features, parse_catalog

SHA = "ab" * 32


def catalog_with(head: dict) -> dict:
    weights = {"role": "weights", "local": "m/m.gguf", "size": 10, "sha256": SHA,
               "repo": "o/r", "remote": "m.gguf"}
    return {"entry": [{"id": "m:1", "name": "M", "publisher": "p", "license": "mit",
                       "modality": "text_generation", "engine": "ggml_llama",
                       "variants": [{"quant": "Q4_0", "files": [weights, head]}]}]}


def head(**over) -> dict:
    return {"role": "mtp_head", "local": "m/mtp.gguf", "size": 5, "sha256": SHA,
            "repo": "o/r", "remote": "mtp.gguf", "optional": "mtp", **over}


def test_an_optional_file_is_kept_apart_from_the_required_ones():
    variant = parse_catalog(catalog_with(head())).entries[0].variants[0]
    assert [f.local for f in variant.files] == ["m/m.gguf"]
    assert [f.local for f in variant.optional_files] == ["m/mtp.gguf"]
    assert variant.size_bytes == 10
    assert variant.optional_for(optional_features("mtp")) == variant.optional_files
    assert variant.optional_for(optional_features("ngram")) == ()
    assert variant.optional_for(optional_features(None)) == ()
    assert optional_features({"mode": "mtp", "n_max": 2}) == ("mtp",)
    assert optional_features({"draft": "x"}) == ()


@pytest.mark.parametrize("over, match", [
    ({"optional": "eagle"}, "optional = 'eagle' is not one of mtp"),
    ({"sha256": "6326fb9f"}, "needs its size and full sha256"),
    ({"sha256": None}, "needs its size and full sha256"),
    ({"size": None}, "needs its size and full sha256"),
])
def test_an_optional_file_must_be_checkable(over, match):
    bad = {k: v for k, v in head(**over).items() if v is not None}
    with pytest.raises(CatalogError, match=match):
        parse_catalog(catalog_with(bad))


def test_every_mtp_head_the_catalog_names_is_an_optional_file_or_says_why_not():
    for entry in load_catalog().entries:
        note = entry.note or ""
        heads = [f for v in entry.variants for f in v.optional_files if f.optional == "mtp"]
        if heads or not re.search(r"\bMTP draft head", note):
            continue
        assert "Hypnos has no speculative decoding" not in note, entry.id
        assert "no full sha256" in note, entry.id
