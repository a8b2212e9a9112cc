"""Datasets, dictionaries and batch helpers of the ``systematicity`` task, one per module as in
``fairseq/data`` (nothing here registers with fairseq).
"""

from .dictionary import (DictionaryMismatchError, SymbolDictionary, check_dictionaries,
                         dictionary_grammar, dictionary_hash)
from .exact_match import exact_match
from .first_epoch_order_dataset import FirstEpochOrderDataset
from .length_chunks import split_by_length
from .random_order_dataset import RandomOrderDataset

__all__ = ["DictionaryMismatchError", "FirstEpochOrderDataset", "RandomOrderDataset",
           "SymbolDictionary", "check_dictionaries", "dictionary_grammar", "dictionary_hash",
           "exact_match", "split_by_length"]
