"""An alias, for users' code: a saved model applied to data, under the name earlier releases gave it.

``jaxgcn.inference.identity_features``, ``evaluation_split``, ``prepare_as_trained``, ``logits``, ...
are re-exported from :mod:`jaxgcn.app.inference`, where each has its one address (the application
layer owns evaluate and predict, as it owns train and sweep). New code imports from there. No module
of the package imports this one (``tests/test_lint.py`` checks).
"""

from __future__ import annotations

from jaxgcn.app.inference import (  # noqa: F401
    Adapted, IdentityFeaturesNeeded, InflatedScore, NoSavedSplit, Saved, as_trained, check_features, checkpoint_model,
    class_names, evaluation_split, has_labels, identity_features, logits, model_task, positions, predict,
    predictions_csv, prepare_as_trained, probabilities, saved_codes, score, task_name, task_note, write_report)
