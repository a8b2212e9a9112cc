"""The SCAN-family language and its data sets.

* the language: :mod:`.grammar` (grammar, interpreter, enumeration), :mod:`.datafiles`
  (``IN: ... OUT: ...`` files and ``.in``/``.out`` pairs);
* measuring data sets: :mod:`.entropy` (slot counts and entropy in bits), :mod:`.divergence`
  (atom and compound divergence), :mod:`.measure` (the report of ``fairseq-entropy measure``);
* building the paper's data sets: :mod:`.levels` (a level, its name and manifest),
  :mod:`.mixing` (Experiment 1's counts per cell), :mod:`.sampling` (seeded draws),
  :mod:`.builders` (Experiments 1 and 2, the SCAN language), :mod:`.components`
  (component-controlled levels), :mod:`.build_requests` (the options of
  ``fairseq-entropy build`` into levels and manifest params), :mod:`.manifests` (a build on
  disk);
* binarizing for fairseq: :mod:`.binarize` (a level, a build, SCAN files), :mod:`.dictionary`
  (the fixed dictionary), :mod:`.subword` (sentencepiece), :mod:`.preprocess` (the
  fairseq-preprocess call), :mod:`.scan_files` (held-out validation, the SCAN-files
  manifest), :mod:`.databin` (file names, :class:`~.databin.BinarizeError`, reading the
  mmap data back).
"""
