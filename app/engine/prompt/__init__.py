"""A conversation into tokens: the model's chat template, what fits its budget, and user text kept literal."""
