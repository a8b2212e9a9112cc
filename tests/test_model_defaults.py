"""models/defaults.py: an architecture filled from its model's dataclass config."""

import argparse
import dataclasses
from typing import Optional

from fairseq.dataclass import FairseqDataclass
from omegaconf import II, OmegaConf, open_dict

from fairseq_entropy.models.defaults import fill_defaults


@dataclasses.dataclass
class _Config(FairseqDataclass):
    width: int = dataclasses.field(default=8, metadata={"help": "width"})
    heads: Optional[int] = dataclasses.field(default=None, metadata={"help": "heads"})
    tied: bool = dataclasses.field(default=True, metadata={"help": "tied"})
    max_source_positions: Optional[int] = II("task.max_source_positions")


def test_fills_what_is_missing_and_keeps_given_values_zero_and_false_included():
    args = argparse.Namespace(width=0, tied=False)
    fill_defaults(args, _Config)
    assert vars(args) == {"width": 0, "tied": False, "heads": None}  # no _name, no ${task.*}


def test_a_namespace_keeps_none_and_an_omegaconf_config_fills_it():
    args = argparse.Namespace(width=None)
    fill_defaults(args, _Config)
    assert args.width is None
    cfg = OmegaConf.create({"width": None, "heads": 2})
    with open_dict(cfg):
        fill_defaults(cfg, _Config)
    assert (cfg.width, cfg.heads, cfg.tied) == (8, 2, True)
