"""The data pipeline: sources, format normalization, validation, chat-template tokenization, packing, sharding.

Errors (all ValueError, their messages say what to fix):
    ValueError           a bad --data, --data-format, --field-map, ... value, or a file that cannot be read
    ├── RowError         one row cannot be used (reason only; the caller adds file and row number)
    └── BadRowError      a bad row met while training under --on-bad-rows error
"""
from yeto.learners.data.check import BadRow, CheckReport, check_data
from yeto.learners.data.collate import collate
from yeto.learners.data.formats import Example, normalize
from yeto.learners.data.pack import Block
from yeto.learners.data.pipeline import BadRowError, iter_blocks
from yeto.learners.data.roles import RowError
from yeto.learners.data.shard import shard_of
from yeto.learners.data.sources import open_source
from yeto.learners.data.spec import FORMATS, DataSpec, parse_field_map
from yeto.learners.data.tokenizer_files import read_tokenizer

__all__ = ["BadRow", "BadRowError", "Block", "CheckReport", "DataSpec", "Example", "FORMATS", "RowError",
           "check_data", "collate", "iter_blocks", "normalize", "open_source", "parse_field_map",
           "read_tokenizer", "shard_of"]
