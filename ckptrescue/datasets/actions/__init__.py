"""The dataset wing's actions (engine steps): manifests, dataset verify, recovery, the hub
cache, training state and profiles, quarantine and the gate, watch passes. Their records:
``datasets/outputs.py``. ``actions.registry()`` reads every module here."""
