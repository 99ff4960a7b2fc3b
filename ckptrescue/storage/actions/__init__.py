"""The storage wing's actions (engine steps): triage, image, copy, fs inspect, mount, umount,
locate, extract (``verbs``) and device health. Their records: ``storage/outputs.py``.
``actions.registry()`` reads every module here."""
