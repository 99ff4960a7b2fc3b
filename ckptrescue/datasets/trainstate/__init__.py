"""Training state across a run's checkpoints: did the run actually train?

Streaming comparisons between consecutive checkpoints, computed from the files without
importing the training code: per-parameter relative update size and sign agreement of
successive updates (:mod:`metrics`, pure), parameters that never change, optimizer step counts
and second moments, learning rate and scheduler state (:mod:`analysis`). Values are read through
the probe's tensor map (:mod:`values`): only byte ranges the probe verified are compared.
"""
