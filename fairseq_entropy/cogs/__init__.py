"""COGS (Kim & Linzen, EMNLP 2020) as a data set of the plugin.

* :mod:`.data`: the TSV files (sentence, logical form, case), the 21 generalization cases and
  their type (lexical / structural), the two logical-form formats (original and variable-free);
* :mod:`.slots`: the (word, slot) occurrences of a sentence, read from its logical form and
  the sentence;
* :mod:`.measure`: slot entropy per generalization case (the report of
  ``fairseq-entropy measure --format cogs``);
* :mod:`.binarize`: the TSV files into a fairseq data-bin with a dictionary built from the
  training split and the case of every sentence beside it;
* :mod:`.mixing`, :mod:`.builder`, :mod:`.build_files`: ``fairseq-entropy build cogs``, training
  sets whose tested slot of a lexical case has a requested entropy (Wold et al., arXiv
  2505.13089, Eq. 1), chosen from COGS's own training sentences, and their files.
"""
