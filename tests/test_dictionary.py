"""data/dictionary.py: the check of a checkpoint's dictionary record against the data's."""

import pytest
from fairseq.data import Dictionary

from fairseq_entropy.data import (DictionaryMismatchError, check_dictionaries,
                                  dictionary_grammar, dictionary_hash)
from fairseq_entropy.errors import UserError


def _dictionary(words):
    d = Dictionary()
    for w in words:
        d.add_symbol(w)
    return d


def test_same_hash_passes_and_another_raises_a_user_error_naming_both():
    a, b = _dictionary(["walk", "jump"]), _dictionary(["jump", "walk"])
    assert dictionary_hash(a, a) != dictionary_hash(b, b)   # ids in order count
    assert dictionary_grammar(a) == "custom"
    mine = {"grammar": "custom", "hash": dictionary_hash(a, a), "source_size": len(a),
            "target_size": len(a)}
    check_dictionaries(dict(mine), mine, "data-bin")
    theirs = {"grammar": "paper", "hash": dictionary_hash(b, b), "source_size": 6,
              "target_size": 6}
    with pytest.raises(DictionaryMismatchError) as e:
        check_dictionaries(theirs, mine, "data-bin")
    assert isinstance(e.value, UserError)
    message = str(e.value)
    assert theirs["hash"] in message and mine["hash"] in message and "data-bin" in message
    assert "--grammar paper" in message
