"""The drill: build a realistic, synthetic incident so responders can rehearse end to end.

Nothing here touches evidence: the drill *creates* a disk image, checkpoints and a bucket. It is
the one place allowed to build filesystems (``mkfs.xfs -p``, no mount needed) and to write to an
S3 endpoint — its own moto server on 127.0.0.1.
"""
