"""The SCAN-family language and its data sets: grammar, slot entropy, builders, files,
binarization."""
