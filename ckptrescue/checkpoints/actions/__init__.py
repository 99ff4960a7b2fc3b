"""The checkpoint wing's actions (engine steps): ``verify`` (probe, salvage, rank) and
``resume`` (the resume checks). Their records: ``checkpoints/outputs.py``; their text:
``checkpoints/render.py``. ``actions.registry()`` reads every module here."""
