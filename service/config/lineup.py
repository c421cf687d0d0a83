"""The default lineup: the catalog's ``lineup = true`` entries as a Config, used when
``hypnos serve`` runs with no config file."""
from __future__ import annotations

import tomllib
from pathlib import Path

from hypnos.catalog.blocks import block_fields, render_blocks
from hypnos.catalog.catalog import Catalog
from hypnos.service.config.load import parse_config
from hypnos.service.config.schema import Config

HEADER = """Hypnos default lineup: small real models for every modality, all from PyPI packages.
Generated from the catalog (catalog/models.catalog.toml, lineup = true)."""


def default_lineup_text(catalog: Catalog) -> str:
    blocks = [block_fields(e, e.default_variant()) for e in catalog.lineup()]
    body = render_blocks(blocks, HEADER)
    return f'config_version = 1\nmodels_dir = "models"\n\n{body}'


def default_lineup_config(catalog: Catalog, models_dir: Path) -> Config:
    cfg = parse_config(tomllib.loads(default_lineup_text(catalog)), base_dir=models_dir.parent)
    cfg.models_dir = models_dir
    return cfg
