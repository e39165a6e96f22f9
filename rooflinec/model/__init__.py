"""The model as symbolic programs: the alphabet, the IR, operator formulas, model blocks, storage formats, lowering and passes."""
